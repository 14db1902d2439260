use duet_core::api::{FeatureInput, Features, GroupQuery, JobRef, PairQuery, PredictRequest};
use duet_core::dataset::Mode;

use super::parse;
use crate::routes::predict::parse_request_over;

fn inline(k: usize) -> JobRef {
    let mut features = Features::new();
    #[allow(clippy::cast_precision_loss)]
    features.insert(
        "solo_throughput".into(),
        FeatureInput::Number(1.0 + k as f64),
    );
    features.insert("batch_size".into(), FeatureInput::Null);
    features.insert("model".into(), FeatureInput::Text(format!("net-{}", k % 7)));
    JobRef {
        workload: None,
        features: Some(features),
    }
}

fn by_id(k: usize) -> JobRef {
    JobRef::workload(format!("w{}", k % 13))
}

/// `pairs` pairs (every third inline) and `groups` groups of 3 to 8 jobs, some with shares and
/// a device of their own; `by_id_groups_last` puts groups of registered ids (few bytes a job)
/// after the inline ones (many).
fn request(pairs: usize, groups: usize, by_id_groups_last: bool) -> PredictRequest {
    PredictRequest {
        gpu: Some("v100".into()),
        pairs: (0..pairs)
            .map(|k| PairQuery {
                a: if k.is_multiple_of(3) {
                    inline(k)
                } else {
                    by_id(k)
                },
                b: by_id(k + 1),
                mode: if k.is_multiple_of(2) {
                    Mode::Mps
                } else {
                    Mode::Timeslice
                },
                share_a: k.is_multiple_of(2).then_some(50.0),
                share_b: k.is_multiple_of(2).then_some(50.0),
                gpu: k.is_multiple_of(5).then(|| "k80".to_string()),
            })
            .collect(),
        groups: (0..groups)
            .map(|g| {
                let size = 3 + g % 6;
                let inline_jobs = if by_id_groups_last {
                    g < groups / 2
                } else {
                    g.is_multiple_of(2)
                };
                GroupQuery {
                    jobs: (0..size)
                        .map(|j| {
                            if inline_jobs {
                                inline(g * 8 + j)
                            } else {
                                by_id(g + j)
                            }
                        })
                        .collect(),
                    mode: Mode::Mps,
                    shares: g.is_multiple_of(4).then(|| vec![10.0; size]),
                    gpu: g.is_multiple_of(3).then(|| "p100".to_string()),
                }
            })
            .collect(),
    }
}

/// Items the one-pass parse counts: every pair, and every pair within each group
/// (`bounded::group_jobs`), what `--max-pairs` counts.
fn items(r: &PredictRequest) -> usize {
    let count = crate::service::predict::pair_count(r);
    assert_eq!(
        count,
        r.pairs.len()
            + r.groups
                .iter()
                .map(|g| g.jobs.len() * (g.jobs.len() - 1) / 2)
                .sum::<usize>()
    );
    count
}

#[test]
fn parts_parse_what_the_one_pass_parse_does() {
    let want = request(3_000, 1_000, false);
    let body = serde_json::to_vec(&want).expect("json");
    assert!(
        body.len() >= crate::shed::WHOLE_BODY_BYTES,
        "{}",
        body.len()
    );
    for parts in [1, 2, 3, 7] {
        assert_eq!(
            parse(&body, 1_000_000, parts).as_ref(),
            Some(&want),
            "{parts}"
        );
    }
    assert_eq!(
        parse_request_over(&body, 1_000_000, 3).expect("parsed"),
        want
    );
    assert_eq!(
        parse_request_over(&body, 1_000_000, 1).expect("parsed"),
        want
    );
    // Exactly at the limit: the parts share it and take it whole.
    let limit = items(&want);
    assert_eq!(parse(&body, limit, 1).as_ref(), Some(&want));
    // Whitespace around and inside, keys in another order: the same.
    let text = String::from_utf8(body.clone()).expect("utf-8");
    let spaced = format!(" \n{}\n ", text.replace(",\"", ",\n  \""));
    assert_eq!(parse(spaced.as_bytes(), 1_000_000, 3).as_ref(), Some(&want));
    let value: serde_json::Value = serde_json::from_slice(&body).expect("value");
    let reordered = format!(
        r#"{{"groups": {}, "gpu": "v100", "pairs": {}}}"#,
        value["groups"], value["pairs"]
    );
    assert_eq!(
        parse(reordered.as_bytes(), 1_000_000, 3).as_ref(),
        Some(&want)
    );
}

/// Every body the parts leave to the one-pass parse gets the one-pass parse's answer.
#[test]
fn what_the_parts_do_not_parse_whole_the_one_pass_parse_answers() {
    let want = request(3_000, 1_000, false);
    let body = serde_json::to_vec(&want).expect("json");
    let limit = items(&want);
    let text = String::from_utf8(body.clone()).expect("utf-8");
    let same = |body: &[u8], limit: usize| {
        let parts = parse_request_over(body, limit, 3);
        let one = parse_request_over(body, limit, 1);
        assert_eq!(parts, one);
        parts
    };
    // One item past the limit: refused, as the pairs limit.
    assert_eq!(parse(&body, limit - 1, 3), None);
    let over = same(&body, limit - 1).expect_err("over the limit");
    assert!(over.error.contains("pairs"), "{over:?}");
    // A bad item in the middle of a part: the one-pass parse names it.
    let at = text
        .match_indices(r#""mode":"timeslice""#)
        .nth(699)
        .map(|(at, _)| at)
        .expect("700 pairs in timeslice");
    let bad = format!(
        "{}{}",
        &text[..at],
        text[at..].replacen("timeslice", "tiemslice", 1)
    );
    assert_eq!(parse(bad.as_bytes(), 1_000_000, 3), None);
    let failure = same(bad.as_bytes(), 1_000_000).expect_err("bad mode");
    assert_eq!(
        failure.field.as_deref(),
        Some("pairs[1399].mode"),
        "{failure:?}"
    );
    // Not an object, an unknown field, trailing bytes, a cut body.
    for body in [
        format!("[{}]", value_of(&text, "gpu")),
        text.replacen("{\"gpu\"", "{\"gpus\"", 1),
        format!("{text} x"),
        text[..text.len() / 2].to_string(),
    ] {
        assert_eq!(parse(body.as_bytes(), 1_000_000, 3), None);
        same(body.as_bytes(), 1_000_000).expect_err("refused");
    }
}

fn value_of(text: &str, field: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(text).expect("value");
    value[field].to_string()
}

/// A part holds nested items up to its share of the limit, in proportion to its bytes: where
/// the groups of registered ids (many jobs a byte) all fall in the last part, it is over its
/// share though the body is within the limit, and the one-pass parse takes it whole.
#[test]
fn a_part_over_its_share_of_the_limit_is_parsed_in_one_pass() {
    let mut want = request(0, 4_000, true);
    for g in &mut want.groups {
        g.jobs.truncate(3);
        g.shares = g.shares.take().map(|_| vec![10.0; 3]);
    }
    let body = serde_json::to_vec(&want).expect("json");
    let limit = items(&want);
    assert_eq!(parse(&body, limit, 2), None);
    assert_eq!(parse_request_over(&body, limit, 2).expect("within"), want);
    // With room to spare the parts parse it.
    assert_eq!(parse(&body, 4 * limit, 2).as_ref(), Some(&want));
}
