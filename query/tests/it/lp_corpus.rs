//! Line protocol as InfluxDB reads it: every decode case of InfluxData's line-protocol corpus
//! (`tests/data/line-protocol-corpus.json`, the cases its reference decoder
//! `github.com/influxdata/line-protocol/v2` answers) is parsed as a write request body. A case
//! the reference refuses must be refused whole; a case it accepts must give the same points
//! (measurement, tags, fields with their types and values, time).
//!
//! Every case is then written into a database: a refused case leaves nothing behind, and an
//! accepted one is read back with SQL, so what is stored is what the reference decoded, not only
//! what the parser returned. The cases EbbDB refuses to store on purpose are those
//! [`stored_deliberate`] names, and the README lists the same differences.

use std::collections::BTreeMap;

use base64::Engine as _;
use ebb_query::lp::{FieldValue, Lines, Precision};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value as Json;

/// A point as both sides give it: names as bytes (the corpus has non-UTF-8 names).
#[derive(Debug, Clone, PartialEq)]
struct Point {
    name: Vec<u8>,
    tags: Vec<(Vec<u8>, Vec<u8>)>,
    fields: Vec<(Vec<u8>, Field)>,
    time: i64,
}

#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// Compared as numbers: the corpus writes -0 as 0.
    Float(f64),
    Int(i64),
    Uint(u64),
    Bool(bool),
    Str(Vec<u8>),
}

/// What a decoder made of a case.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Refused(String),
    Points(Vec<Point>),
}

fn bytes_of(v: &Json) -> Vec<u8> {
    match v {
        Json::String(s) => s.as_bytes().to_vec(),
        Json::Object(o) => {
            let b = o.get("binary").and_then(Json::as_str).expect("binary");
            base64::engine::general_purpose::STANDARD.decode(b).expect("base64")
        }
        other => panic!("not a string or binary: {other}"),
    }
}

/// A point of the corpus. Values stay JSON text until read: `serde_json` does not round every
/// float correctly, `f64::from_str` does.
#[derive(Deserialize)]
struct ReferencePoint {
    time: i64,
    name: Json,
    #[serde(default)]
    tags: Option<Vec<ReferencePair>>,
    #[serde(default)]
    fields: Option<Vec<ReferenceField>>,
}

#[derive(Deserialize)]
struct ReferencePair {
    key: Json,
    value: Json,
}

#[derive(Deserialize)]
struct ReferenceField {
    key: Json,
    value: BTreeMap<String, Box<RawValue>>,
}

fn reference_point(p: ReferencePoint) -> Point {
    let field = |kind: &str, raw: &str| -> Field {
        let text = || serde_json::from_str::<String>(raw).expect("text");
        match kind {
            "float" => Field::Float(raw.parse::<f64>().expect("float")),
            "int" => Field::Int(raw.parse().expect("int")),
            "uint" => Field::Uint(raw.parse().expect("uint")),
            "bool" => Field::Bool(raw.parse().expect("bool")),
            "string" => Field::Str(text().into_bytes()),
            "binary" => Field::Str(
                base64::engine::general_purpose::STANDARD.decode(text()).expect("base64"),
            ),
            other => panic!("unknown value kind {other}"),
        }
    };
    Point {
        name: bytes_of(&p.name),
        tags: p
            .tags
            .unwrap_or_default()
            .iter()
            .map(|t| (bytes_of(&t.key), bytes_of(&t.value)))
            .collect(),
        fields: p
            .fields
            .unwrap_or_default()
            .iter()
            .map(|f| {
                let (kind, raw) = f.value.iter().next().expect("a value");
                (bytes_of(&f.key), field(kind, raw.get()))
            })
            .collect(),
        time: p.time,
    }
}

fn precision_of(p: &str) -> Precision {
    match p {
        "1ns" => Precision::Nanoseconds,
        "1µs" => Precision::Microseconds,
        "1ms" => Precision::Milliseconds,
        "1s" => Precision::Seconds,
        "1m" => Precision::Minutes,
        "1h" => Precision::Hours,
        other => panic!("precision {other}"),
    }
}

fn ours(text: &[u8], precision: Precision, default_time: i64) -> Outcome {
    let Ok(body) = std::str::from_utf8(text) else {
        return Outcome::Refused("not UTF-8".into());
    };
    let mut points = Vec::new();
    for item in Lines::new(body) {
        let (_, line) = match item {
            Ok(l) => l,
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        let Some(time) = precision.time_of(line.timestamp, default_time) else {
            return Outcome::Refused("timestamp out of range".into());
        };
        points.push(Point {
            name: line.measurement.as_bytes().to_vec(),
            tags: sorted(
                line.tags
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                    .collect(),
            ),
            fields: line
                .fields
                .iter()
                .map(|(k, v)| {
                    let f = match v {
                        FieldValue::Float(x) => Field::Float(*x),
                        FieldValue::Integer(x) => Field::Int(*x),
                        FieldValue::UInteger(x) => Field::Uint(*x),
                        FieldValue::Boolean(x) => Field::Bool(*x),
                        FieldValue::String(s) => Field::Str(s.as_bytes().to_vec()),
                    };
                    (k.as_bytes().to_vec(), f)
                })
                .collect(),
            time,
        });
    }
    Outcome::Points(points)
}

/// Tags sorted by key: the reference harness sorts them (a tag set has no order).
fn sorted(mut tags: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    tags.sort();
    tags
}

struct Case {
    key: String,
    text: Vec<u8>,
    precision: Precision,
    default_time: i64,
    reference: Outcome,
}

#[derive(Deserialize)]
struct Corpus {
    decode: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    input: Input,
    output: Output,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    text: Json,
    default_time: i64,
    precision: String,
}

#[derive(Deserialize)]
struct Output {
    error: Option<String>,
    result: Option<Vec<ReferencePoint>>,
}

fn corpus() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/line-protocol-corpus.json");
    let raw = std::fs::read(path).expect("corpus");
    let corpus: Corpus = serde_json::from_slice(&raw).expect("corpus JSON");
    corpus
        .decode
        .into_iter()
        .map(|(key, Entry { input, output })| {
            let reference = match output.error {
                Some(e) => Outcome::Refused(e),
                None => Outcome::Points(
                    output.result.unwrap_or_default().into_iter().map(reference_point).collect(),
                ),
            };
            Case {
                key,
                text: bytes_of(&input.text),
                precision: precision_of(&input.precision),
                default_time: input.default_time,
                reference,
            }
        })
        .collect()
}

#[test]
fn the_influxdata_corpus_decodes_as_the_reference_does() {
    let cases = corpus();
    assert!(cases.len() > 6_000, "{} cases", cases.len());
    let mut agree = 0;
    let mut disagree = Vec::new();
    for case in &cases {
        let got = ours(&case.text, case.precision, case.default_time);
        let same = match (&got, &case.reference) {
            (Outcome::Refused(_), Outcome::Refused(_)) => true,
            (a, b) => a == b,
        };
        if same {
            agree += 1;
        } else {
            disagree.push(format!(
                "{}: {:?}\n  reference: {:?}\n  ebb:       {:?}",
                case.key,
                String::from_utf8_lossy(&case.text),
                case.reference,
                got
            ));
        }
    }
    eprintln!("{agree} of {} cases agree", cases.len());
    assert!(disagree.is_empty(), "{} cases disagree:\n{}", disagree.len(), disagree.join("\n"));
}

/// What a database should hold after a body is written: per table, per series (tags sorted)
/// and time, the fields. Points of one series and time merge, a later value of a field
/// replacing an earlier one, as InfluxDB stores them.
type Stored = BTreeMap<Vec<u8>, BTreeMap<(Vec<(Vec<u8>, Vec<u8>)>, i64), BTreeMap<Vec<u8>, Field>>>;

fn stored(points: &[Point]) -> Stored {
    let mut out = Stored::new();
    for p in points {
        let row =
            out.entry(p.name.clone()).or_default().entry((p.tags.clone(), p.time)).or_default();
        for (k, v) in &p.fields {
            row.insert(k.clone(), v.clone());
        }
    }
    out
}

fn cell(col: &dyn datafusion::arrow::array::Array, row: usize) -> Option<Field> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{
        DataType, Float64Type, Int64Type, TimestampNanosecondType, UInt64Type,
    };
    if col.is_null(row) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Float64 => Field::Float(col.as_primitive::<Float64Type>().value(row)),
        DataType::Int64 => Field::Int(col.as_primitive::<Int64Type>().value(row)),
        DataType::UInt64 => Field::Uint(col.as_primitive::<UInt64Type>().value(row)),
        DataType::Boolean => Field::Bool(col.as_boolean().value(row)),
        DataType::Utf8 => Field::Str(col.as_string::<i32>().value(row).as_bytes().to_vec()),
        DataType::Timestamp(_, _) => {
            Field::Int(col.as_primitive::<TimestampNanosecondType>().value(row))
        }
        DataType::Dictionary(_, _) => {
            let cast = datafusion::arrow::compute::cast(col, &DataType::Utf8).expect("cast");
            Field::Str(cast.as_string::<i32>().value(row).as_bytes().to_vec())
        }
        other => panic!("column type {other}"),
    })
}

/// What the database holds of table `name` in database `db`, read back with SQL, given which
/// columns are tags.
async fn read_back(
    db: &std::sync::Arc<ebb_query::Database>,
    database: &str,
    name: &[u8],
    tag_keys: &std::collections::BTreeSet<Vec<u8>>,
) -> Result<BTreeMap<(Vec<(Vec<u8>, Vec<u8>)>, i64), BTreeMap<Vec<u8>, Field>>, String> {
    let table = String::from_utf8(name.to_vec()).expect("UTF-8");
    let session = ebb_query::SqlSession::new(db.clone(), database);
    let sql = format!("SELECT * FROM \"{}\"", table.replace('"', "\"\""));
    let batches = session.query(&sql).await.map_err(|e| format!("{sql}: {e}"))?;
    let mut rows = BTreeMap::new();
    for batch in &batches {
        let schema = batch.schema();
        for r in 0..batch.num_rows() {
            let (mut tags, mut fields, mut time) = (Vec::new(), BTreeMap::new(), None);
            for (i, f) in schema.fields().iter().enumerate() {
                let key = f.name().as_bytes().to_vec();
                let Some(v) = cell(batch.column(i).as_ref(), r) else { continue };
                if f.name() == "time" {
                    let Field::Int(t) = v else { unreachable!() };
                    time = Some(t);
                } else if tag_keys.contains(&key) {
                    let Field::Str(s) = v else {
                        return Err(format!("tag {} is not text", f.name()));
                    };
                    tags.push((key, s));
                } else {
                    fields.insert(key, v);
                }
            }
            tags.sort();
            rows.insert((tags, time.ok_or("no time")?), fields);
        }
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_corpus_cases_are_stored_as_the_reference_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ebb_storage::Options { sync: ebb_storage::SyncMode::None, ..Default::default() };
    let db = std::sync::Arc::new(ebb_query::Database::open(dir.path(), opts).expect("open"));
    let (mut stored_ok, mut explained) = (0, BTreeMap::<&str, usize>::new());
    let mut wrong = Vec::new();
    let mut refused = 0;
    for (n, case) in corpus().iter().enumerate() {
        let database = format!("c{n}");
        let Outcome::Points(points) = &case.reference else {
            // Refused whole: no database, table or row of it is created.
            let Ok(body) = std::str::from_utf8(&case.text) else { continue };
            match db.write_lines(&database, body, case.precision, case.default_time) {
                Ok(w) => wrong.push(format!(
                    "{}: {body:?}: stored {} rows of a refused body",
                    case.key, w.rows
                )),
                Err(_) if db.catalog().has_database(&database) => {
                    wrong.push(format!("{}: {body:?}: refused but created its database", case.key))
                }
                Err(_) => refused += 1,
            }
            continue;
        };
        let body = std::str::from_utf8(&case.text).expect("accepted cases are UTF-8");
        let expected = stored(points);
        let written = db.write_lines(&database, body, case.precision, case.default_time);
        if let Err(e) = written {
            match stored_deliberate(points) {
                Some(why) => *explained.entry(why).or_default() += 1,
                None => wrong.push(format!("{}: {:?}: refused: {e}", case.key, body)),
            }
            continue;
        }
        for (name, rows) in &expected {
            let tag_keys =
                rows.keys().flat_map(|(tags, _)| tags.iter().map(|(k, _)| k.clone())).collect();
            match read_back(&db, &database, name, &tag_keys).await {
                Ok(got) if &got == rows => stored_ok += 1,
                Ok(got) => wrong.push(format!(
                    "{}: {:?}\n  expected {rows:?}\n  stored   {got:?}",
                    case.key, body
                )),
                Err(e) => wrong.push(format!("{}: {:?}: {e}", case.key, body)),
            }
        }
    }
    eprintln!(
        "{refused} bodies refused whole; {stored_ok} tables stored as the reference reads them; \
         refused on purpose: {explained:?}"
    );
    assert!(
        stored_ok > 300 && refused > 4_000,
        "{stored_ok} tables and {refused} refusals checked"
    );
    assert!(wrong.is_empty(), "{} cases stored otherwise:\n{}", wrong.len(), wrong.join("\n"));
}

/// Why EbbDB refuses to store points the reference decodes, on purpose: `time` names the time
/// column of every table, so no tag or field may take it (InfluxDB 1.x drops such a tag or field
/// silently, and refuses the point if nothing else is left).
fn stored_deliberate(points: &[Point]) -> Option<&'static str> {
    let time = |k: &Vec<u8>| k.as_slice() == b"time";
    points
        .iter()
        .any(|p| p.tags.iter().any(|(k, _)| time(k)) || p.fields.iter().any(|(k, _)| time(k)))
        .then_some("a tag or field named time")
}
