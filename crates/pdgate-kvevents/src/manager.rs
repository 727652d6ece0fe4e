//! Subscription manager (in progress).
