//! Line-protocol parser fuzzing: arbitrary input never panics, and lines rendered from random
//! points (with every character that needs escaping) parse back to the same points.

use ebb_query::lp::{parse_line, FieldValue, Lines};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    // Printable text including the characters line protocol escapes.
    "[a-zA-Z0-9_ ,=\\\\\"é.-]{1,12}".prop_filter("not only spaces or #", |s| {
        !s.trim().is_empty() && !s.starts_with('#') && !s.starts_with(' ') && !s.ends_with('\\')
    })
}

#[derive(Debug, Clone)]
enum V {
    F(f64),
    I(i64),
    U(u64),
    B(bool),
    S(String),
}

fn value() -> impl Strategy<Value = V> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(V::F),
        any::<i64>().prop_map(V::I),
        any::<u64>().prop_map(V::U),
        any::<bool>().prop_map(V::B),
        "[a-z ,=\"\\\\é]{0,12}".prop_map(V::S),
    ]
}

fn esc(s: &str, chars: &[char]) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if chars.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn render(m: &str, tags: &[(String, String)], fields: &[(String, V)], ts: Option<i64>) -> String {
    let mut line = esc(m, &[',', ' ']);
    for (k, v) in tags {
        line.push(',');
        line.push_str(&esc(k, &[',', '=', ' ']));
        line.push('=');
        line.push_str(&esc(v, &[',', '=', ' ']));
    }
    line.push(' ');
    let f: Vec<String> = fields
        .iter()
        .map(|(k, v)| {
            let val = match v {
                V::F(x) => format!("{x:?}"),
                V::I(x) => format!("{x}i"),
                V::U(x) => format!("{x}u"),
                V::B(x) => x.to_string(),
                V::S(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            };
            format!("{}={val}", esc(k, &[',', '=', ' ']))
        })
        .collect();
    line.push_str(&f.join(","));
    if let Some(t) = ts {
        line.push_str(&format!(" {t}"));
    }
    line
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_never_panics(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let s = String::from_utf8_lossy(&body);
        for r in Lines::new(&s) {
            let _ = r;
        }
    }

    #[test]
    fn near_valid_input_never_panics(body in "[a-z,= \"\\\\0-9.itfu#\n-]{0,80}") {
        for r in Lines::new(&body) {
            let _ = r;
        }
    }

    #[test]
    fn rendered_points_round_trip(
        m in name(),
        tags in prop::collection::btree_map(name(), name(), 0..4),
        fields in prop::collection::vec((name(), value()), 1..5),
        ts in prop::option::of(any::<i64>()),
    ) {
        let tags: Vec<_> = tags.into_iter().collect();
        let line = render(&m, &tags, &fields, ts);
        let l = parse_line(&line).map_err(|e| TestCaseError::fail(format!("{line:?}: {e}")))?;
        prop_assert_eq!(l.measurement.as_ref(), m.as_str());
        prop_assert_eq!(l.tags.len(), tags.len());
        for ((k, v), (pk, pv)) in tags.iter().zip(&l.tags) {
            prop_assert_eq!(k.as_str(), pk.as_ref());
            prop_assert_eq!(v.as_str(), pv.as_ref());
        }
        prop_assert_eq!(l.fields.len(), fields.len());
        for ((k, v), (pk, pv)) in fields.iter().zip(&l.fields) {
            prop_assert_eq!(k.as_str(), pk.as_ref());
            let same = match (v, pv) {
                (V::F(a), FieldValue::Float(b)) => a == b,
                (V::I(a), FieldValue::Integer(b)) => a == b,
                (V::U(a), FieldValue::UInteger(b)) => a == b,
                (V::B(a), FieldValue::Boolean(b)) => a == b,
                (V::S(a), FieldValue::String(b)) => a == b,
                _ => false,
            };
            prop_assert!(same, "{line:?}: {v:?} vs {pv:?}");
        }
        prop_assert_eq!(l.timestamp, ts);
    }
}
