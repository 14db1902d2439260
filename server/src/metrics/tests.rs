//! The metrics' own tests: both formats, their families and series.

use super::*;

const BOTH: [Format; 2] = [Format::OpenMetrics, Format::Text];

fn sample_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

/// Each line is a `# HELP`, `# TYPE` (or, in OpenMetrics, `# UNIT`) line of a valid name,
/// or a sample: a valid name, labels of valid names with quoted, escaped values, and a
/// number; OpenMetrics ends with `# EOF`.
fn check_shape(text: &str, format: Format) {
    let name_ok = |n: &str| {
        let mut chars = n.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if format == Format::OpenMetrics {
        assert_eq!(lines.pop(), Some("# EOF\n"), "{text}");
    }
    let types: &[&str] = match format {
        Format::OpenMetrics => &["counter", "gauge", "histogram", "unknown"],
        Format::Text => &["counter", "gauge", "histogram", "untyped"],
    };
    for line in lines {
        let line = line
            .strip_suffix('\n')
            .expect("every line ends with a line feed");
        if let Some(meta) = line.strip_prefix("# ") {
            let mut words = meta.splitn(3, ' ');
            let (kind, name, rest) = (words.next(), words.next(), words.next());
            match (format, kind) {
                (_, Some("HELP" | "TYPE")) | (Format::OpenMetrics, Some("UNIT")) => {}
                _ => panic!("{line}"),
            }
            assert!(name.is_some_and(name_ok), "{line}");
            assert!(rest.is_some_and(|r| !r.is_empty()), "{line}");
            if kind == Some("TYPE") {
                assert!(rest.is_some_and(|t| types.contains(&t)), "{line}");
            }
            continue;
        }
        let end = line.find(['{', ' ']).expect("a name");
        assert!(name_ok(&line[..end]), "{line}");
        let mut rest = &line[end..];
        if let Some(mut labels) = rest.strip_prefix('{') {
            loop {
                let eq = labels.find('=').expect("name=value");
                assert!(name_ok(&labels[..eq]), "{line}");
                let value = labels[eq + 1..].strip_prefix('"').expect("a quoted value");
                let mut chars = value.char_indices();
                let close = loop {
                    match chars.next().expect("a closing quote") {
                        (_, '\\') => {
                            let (_, escaped) = chars.next().expect("an escape");
                            assert!(matches!(escaped, '\\' | '"' | 'n'), "{line}");
                        }
                        (i, '"') => break i,
                        _ => {}
                    }
                };
                labels = &value[close + 1..];
                if let Some(next) = labels.strip_prefix(',') {
                    labels = next;
                } else {
                    rest = labels.strip_prefix('}').expect("a closing brace");
                    break;
                }
            }
        }
        let value = rest.strip_prefix(' ').expect("a space before the value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
}

#[test]
fn the_accept_header_picks_the_format() {
    for (accept, want) in [
        (None, Format::Text),
        (Some(""), Format::Text),
        (Some("*/*"), Format::Text),
        (Some("text/plain; version=0.0.4"), Format::Text),
        (Some("application/json"), Format::Text),
        (Some("application/openmetrics-text"), Format::OpenMetrics),
        // Prometheus 2 and 3.
        (
            Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ),
            Format::OpenMetrics,
        ),
        (
            Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
                 encoding=delimited;q=0.7,application/openmetrics-text;version=1.0.0;\
                 escaping=allow-utf-8;q=0.6,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            ),
            Format::OpenMetrics,
        ),
        (
            Some("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
            Format::Text,
        ),
        (Some("application/openmetrics-text;q=0"), Format::Text),
    ] {
        assert_eq!(Format::negotiate(accept), want, "{accept:?}");
    }
}

#[test]
fn a_fresh_server_exports_the_outcomes_and_the_guards_at_zero() {
    for format in BOTH {
        let text = Metrics::default().render(Scrape::default(), format);
        check_shape(&text, format);
        for line in [
            "duet_observations_total{outcome=\"stored\"} 0",
            "duet_observations_total{outcome=\"duplicate\"} 0",
            "duet_observations_total{outcome=\"rejected\"} 0",
            "duet_model_reloads_total 0",
            "duet_requests_shed_total 0",
            "duet_work_in_flight 0",
            "duet_registered_workloads 0",
            "duet_registry_database_errors_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        // Families with no series yet are left out, as the crate (and Prometheus' Go
        // client) does; no `_created` series.
        assert!(!text.contains("duet_requests_total"), "{text}");
        assert!(!text.contains("duet_drift_"), "{text}");
        assert!(!text.contains("_created"), "{text}");
    }
}

#[test]
fn counts_keep_the_names_buckets_and_labels_they_had() {
    let metrics = Metrics::default();
    metrics.request("/v1/predict", 200, 0.003);
    metrics.request("/v1/predict", 200, 7.0);
    metrics.request("/v1/predict", 422, 0.0001);
    metrics.pairs(10_000);
    metrics.reload(false);
    metrics.observation("stored");
    let score = |ape, covered| crate::drift::JobScore {
        ape,
        covered,
        bias: ape,
    };
    metrics.observed("v100", "space", &[score(0.25, true), score(0.5, false)]);
    metrics.observed("other", "solo", &[]);
    metrics.guards.panics.fetch_add(1, Ordering::Relaxed);
    let mut tally = crate::drift::Tally::default();
    tally.add(score(0.25, true), 1.0e9);
    tally.add(score(0.5, false), 1.0e9);
    let scrape = Scrape {
        model_version: "0.1.0+abc".into(),
        engine: "burn",
        workloads: 26,
        drift: vec![
            (("v100".into(), duet_core::dataset::Mode::Space), tally),
            (
                ("k80".into(), duet_core::dataset::Mode::Mps),
                crate::drift::Tally::default(),
            ),
        ],
        store: "sqlite",
        sequence: 7,
        last_sync_age_s: Some(1.23456),
        ..Scrape::default()
    };
    for format in BOTH {
        let text = metrics.render(scrape.clone(), format);
        check_shape(&text, format);
        let samples = sample_lines(&text);
        // Whole numbers: `5` in the classic format (as before), `5.0` in OpenMetrics,
        // where `le` also comes before the series' labels.
        let whole = |n: &str| match format {
            Format::Text => n.to_string(),
            Format::OpenMetrics => format!("{n}.0"),
        };
        let bucket = |le: &str, n: u32| match format {
            Format::Text => format!(
                "duet_request_duration_seconds_bucket{{route=\"/v1/predict\",le=\"{le}\"}} {n}"
            ),
            Format::OpenMetrics => format!(
                "duet_request_duration_seconds_bucket{{le=\"{le}\",route=\"/v1/predict\"}} {n}"
            ),
        };
        let lines = [
            "duet_requests_total{route=\"/v1/predict\",status=\"200\"} 2".to_string(),
            "duet_requests_total{route=\"/v1/predict\",status=\"422\"} 1".to_string(),
            "duet_request_duration_seconds_count{route=\"/v1/predict\"} 3".to_string(),
            bucket("0.0001", 1),
            bucket("0.005", 2),
            bucket(&whole("5"), 2),
            bucket("+Inf", 3),
            format!("duet_predict_pairs_bucket{{le=\"{}\"}} 0", whole("5000")),
            format!("duet_predict_pairs_bucket{{le=\"{}\"}} 1", whole("10000")),
            "duet_predict_pairs_count 1".to_string(),
            "duet_model_reload_failures_total 1".to_string(),
            "duet_observations_total{outcome=\"stored\"} 1".to_string(),
            "duet_observed_total{gpu=\"v100\",mode=\"space\"} 1".to_string(),
            "duet_observed_jobs_scored_total{gpu=\"v100\",mode=\"space\"} 2".to_string(),
            "duet_observed_speed_ape_sum{gpu=\"v100\",mode=\"space\"} 0.75".to_string(),
            "duet_observed_p90_covered_total{gpu=\"v100\",mode=\"space\"} 1".to_string(),
            "duet_observed_total{gpu=\"other\",mode=\"solo\"} 1".to_string(),
            "duet_observed_jobs_scored_total{gpu=\"other\",mode=\"solo\"} 0".to_string(),
            "duet_model_info{version=\"0.1.0+abc\",engine=\"burn\"} 1".to_string(),
            "duet_registered_workloads 26".to_string(),
            "duet_drift_speed_mape{gpu=\"v100\",mode=\"space\"} 0.375".to_string(),
            "duet_drift_p90_coverage{gpu=\"v100\",mode=\"space\"} 0.5".to_string(),
            "duet_drift_window_jobs{gpu=\"v100\",mode=\"space\"} 2".to_string(),
            "duet_registry_sequence{store=\"sqlite\"} 7".to_string(),
            "duet_registry_last_sync_age_seconds 1.235".to_string(),
            "duet_registry_degraded 0".to_string(),
            "duet_panics_total 1".to_string(),
        ];
        for line in &lines {
            assert!(samples.contains(&line.as_str()), "no `{line}` in\n{text}");
        }
        // Every latency bucket, in order, then +Inf.
        let got: Vec<f64> = samples
            .iter()
            .filter(|l| l.starts_with("duet_request_duration_seconds_bucket{"))
            .filter(|l| l.contains("route=\"/v1/predict\""))
            .filter_map(|l| l.split("le=\"").nth(1))
            .map(|l| l[..l.find('"').expect("le")].parse().expect("a bound"))
            .collect();
        let want: Vec<f64> = LATENCY.iter().copied().chain([f64::INFINITY]).collect();
        assert_eq!(got, want, "{text}");
        // An empty window has no gauges.
        assert!(!text.contains("gpu=\"k80\""), "{text}");
    }
    let open = metrics.render(scrape.clone(), Format::OpenMetrics);
    assert!(open.contains("# UNIT duet_request_duration_seconds seconds\n"));
    assert!(open.contains("# TYPE duet_observed_speed_ape_sum unknown\n"));
    assert!(open.contains("# TYPE duet_requests counter\n"));
    let classic = metrics.render(scrape, Format::Text);
    assert!(classic.contains("# TYPE duet_observed_speed_ape_sum untyped\n"));
    assert!(classic.contains("# TYPE duet_requests_total counter\n"));
}

#[test]
fn label_values_are_escaped() {
    let metrics = Metrics::default();
    metrics.request("a \"quoted\" \\ route\nwith a line feed", 200, 0.1);
    for format in BOTH {
        let text = metrics.render(
            Scrape {
                model_version: "v\"1\\".into(),
                ..Scrape::default()
            },
            format,
        );
        check_shape(&text, format);
        assert!(
            text.contains(
                "duet_requests_total{route=\"a \\\"quoted\\\" \\\\ route\\nwith a line \
                 feed\",status=\"200\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("duet_model_info{version=\"v\\\"1\\\\\",engine=\"\"} 1"),
            "{text}"
        );
    }
}
