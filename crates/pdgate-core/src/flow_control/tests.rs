//! Unit tests of the flow controller (`flow_control/`).

use super::*;

fn controller(gate: bool) -> Arc<FlowController> {
    let settings = FlowSettings {
        gate,
        ..FlowSettings::default()
    };
    FlowController::new(
        settings,
        &Objectives::default(),
        Arc::new(EndpointRegistry::default()),
        &prometheus::Registry::new(),
    )
}

fn key() -> FlowKey {
    FlowKey {
        priority: 0,
        flow: Arc::from(pdgate_scheduler::flow::DEFAULT_FLOW),
        slo_ttft_ms: None,
        bytes: 10,
    }
}

#[tokio::test]
async fn after_shutdown_every_request_is_refused() {
    for gate in [false, true] {
        let c = controller(gate);
        assert!(!c.is_shutting_down());
        assert_eq!(c.legacy_check(0), Ok(()));
        c.shutdown();
        assert!(c.is_shutting_down());
        assert_eq!(c.legacy_check(0), Err(Outcome::RejectedOther));
        assert!(matches!(c.admit(key()).await, Err(Outcome::RejectedOther)));
    }
}

#[tokio::test]
async fn an_empty_pool_queues_then_refuses_at_capacity_as_no_endpoints() {
    let mut settings = FlowSettings {
        gate: true,
        ..FlowSettings::default()
    };
    settings.control.bands[0].max_requests = 1;
    let c = FlowController::new(
        settings,
        &Objectives::default(),
        Arc::new(EndpointRegistry::default()),
        &prometheus::Registry::new(),
    );
    // No endpoints: saturation 1.0, so the first request waits in the band…
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.admit(key()).await.map(|_| ()) }
    });
    while c.queued() == 0 {
        tokio::task::yield_now().await;
    }
    // …and the band is full: the next is refused as "no endpoints" (503), not 429.
    assert!(matches!(
        c.admit(key()).await,
        Err(Outcome::RejectedNoEndpoints)
    ));
    c.shutdown();
    assert_eq!(waiting.await.unwrap(), Err(Outcome::EvictedOther));
    assert_eq!(c.queued(), 0);
}
