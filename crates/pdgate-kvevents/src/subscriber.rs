//! Subscriber (in progress).
