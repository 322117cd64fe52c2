//! A TrafficPolicy's `outlierDetection` (a Service or `Backend` field): validation into
//! [`OutlierDetection`], unset fields taking weir's defaults ([`Ejection::default`]).

use std::time::Duration;

use weir_api::OutlierDetectionSpec;
use weir_model::{Ejection, OutlierDetection};

use crate::compile::duration;

const MAX_CONSECUTIVE: i64 = 1000;
const MIN_EJECTION: Duration = Duration::from_millis(10);
const MAX_EJECTION: Duration = Duration::from_secs(3600);

/// `outlierDetection` at `field` (`spec.outlierDetection`).
pub(crate) fn outlier_detection(
    o: &OutlierDetectionSpec,
    field: &str,
) -> Result<OutlierDetection, String> {
    let percent = |v: Option<i64>, name: &str, default: u32| match v {
        None => Ok(default),
        Some(n) if (0..=100).contains(&n) => Ok(n as u32),
        Some(n) => Err(format!("{field}.{name}: {n} is not between 0 and 100")),
    };
    let panic_threshold_percent = percent(o.panic_threshold_percent, "panicThresholdPercent", 0)?;
    if o.enabled == Some(false) {
        let set = [
            ("consecutive5xx", o.consecutive_5xx.is_some()),
            (
                "consecutiveGatewayErrors",
                o.consecutive_gateway_errors.is_some(),
            ),
            (
                "consecutiveLocalOriginFailures",
                o.consecutive_local_origin_failures.is_some(),
            ),
            ("baseEjectionTime", o.base_ejection_time.is_some()),
            ("maxEjectionTime", o.max_ejection_time.is_some()),
            ("maxEjectedPercent", o.max_ejected_percent.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{field}.{name}: only with detection enabled (enabled is false)"
            ));
        }
        return Ok(OutlierDetection {
            ejection: None,
            panic_threshold_percent,
        });
    }
    let d = Ejection::default();
    let count = |v: Option<i64>, name: &str, default: u32| match v {
        None => Ok(default),
        Some(n) if (0..=MAX_CONSECUTIVE).contains(&n) => Ok(n as u32),
        Some(n) => Err(format!(
            "{field}.{name}: {n} is not between 0 and {MAX_CONSECUTIVE}"
        )),
    };
    let time = |v: &Option<String>, name: &str| -> Result<Option<Duration>, String> {
        let Some(s) = v else { return Ok(None) };
        let t = duration::parse(s)
            .map_err(|e| format!("{field}.{name}: {e}"))?
            .unwrap_or(Duration::ZERO);
        if !(MIN_EJECTION..=MAX_EJECTION).contains(&t) {
            return Err(format!("{field}.{name}: {t:?} is not between 10ms and 1h"));
        }
        Ok(Some(t))
    };
    let consecutive_5xx = count(o.consecutive_5xx, "consecutive5xx", d.consecutive_5xx)?;
    let consecutive_gateway_errors = count(
        o.consecutive_gateway_errors,
        "consecutiveGatewayErrors",
        d.consecutive_gateway_errors,
    )?;
    let consecutive_local_origin_failures = count(
        o.consecutive_local_origin_failures,
        "consecutiveLocalOriginFailures",
        d.consecutive_local_origin_failures,
    )?;
    let base_ejection = time(&o.base_ejection_time, "baseEjectionTime")?.unwrap_or(d.base_ejection);
    let max_ejection = match time(&o.max_ejection_time, "maxEjectionTime")? {
        None => d.max_ejection.max(base_ejection),
        Some(t) if t < base_ejection => {
            return Err(format!(
                "{field}.maxEjectionTime: {t:?} is below baseEjectionTime ({base_ejection:?})"
            ));
        }
        Some(t) => t,
    };
    let max_ejected_percent = percent(
        o.max_ejected_percent,
        "maxEjectedPercent",
        d.max_ejected_percent,
    )?;
    Ok(OutlierDetection {
        ejection: Some(Ejection {
            consecutive_5xx,
            consecutive_gateway_errors,
            consecutive_local_origin_failures,
            base_ejection,
            max_ejection,
            max_ejected_percent,
        }),
        panic_threshold_percent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "spec.outlierDetection";

    #[test]
    fn defaults_fill_what_is_unset() {
        let empty = outlier_detection(&OutlierDetectionSpec::default(), F).unwrap();
        assert_eq!(empty, OutlierDetection::default());
        let tuned = outlier_detection(
            &OutlierDetectionSpec {
                consecutive_5xx: Some(1),
                base_ejection_time: Some("5s".into()),
                panic_threshold_percent: Some(50),
                ..Default::default()
            },
            F,
        )
        .unwrap();
        let e = tuned.ejection.unwrap();
        assert_eq!(e.consecutive_5xx, 1);
        assert_eq!(e.consecutive_gateway_errors, 5, "the default stays");
        assert_eq!(e.base_ejection, Duration::from_secs(5));
        assert_eq!(e.max_ejection, Duration::from_secs(5), "at least the base");
        assert_eq!(tuned.panic_threshold_percent, 50);
        let off = outlier_detection(
            &OutlierDetectionSpec {
                enabled: Some(false),
                panic_threshold_percent: Some(30),
                ..Default::default()
            },
            F,
        )
        .unwrap();
        assert_eq!(off.ejection, None);
        assert_eq!(off.panic_threshold_percent, 30);
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |o: OutlierDetectionSpec, want: &str| {
            let e = outlier_detection(&o, F).unwrap_err();
            assert!(e.starts_with(want), "{e} should start with {want}");
        };
        bad(
            OutlierDetectionSpec {
                consecutive_5xx: Some(-1),
                ..Default::default()
            },
            "spec.outlierDetection.consecutive5xx",
        );
        bad(
            OutlierDetectionSpec {
                consecutive_gateway_errors: Some(1001),
                ..Default::default()
            },
            "spec.outlierDetection.consecutiveGatewayErrors",
        );
        bad(
            OutlierDetectionSpec {
                consecutive_local_origin_failures: Some(5000),
                ..Default::default()
            },
            "spec.outlierDetection.consecutiveLocalOriginFailures",
        );
        bad(
            OutlierDetectionSpec {
                base_ejection_time: Some("1ms".into()),
                ..Default::default()
            },
            "spec.outlierDetection.baseEjectionTime",
        );
        bad(
            OutlierDetectionSpec {
                base_ejection_time: Some("10s".into()),
                max_ejection_time: Some("1s".into()),
                ..Default::default()
            },
            "spec.outlierDetection.maxEjectionTime",
        );
        bad(
            OutlierDetectionSpec {
                max_ejection_time: Some("soon".into()),
                ..Default::default()
            },
            "spec.outlierDetection.maxEjectionTime",
        );
        bad(
            OutlierDetectionSpec {
                max_ejected_percent: Some(101),
                ..Default::default()
            },
            "spec.outlierDetection.maxEjectedPercent",
        );
        bad(
            OutlierDetectionSpec {
                panic_threshold_percent: Some(-5),
                ..Default::default()
            },
            "spec.outlierDetection.panicThresholdPercent",
        );
        bad(
            OutlierDetectionSpec {
                enabled: Some(false),
                consecutive_5xx: Some(1),
                ..Default::default()
            },
            "spec.outlierDetection.consecutive5xx: only with detection enabled",
        );
    }
}
