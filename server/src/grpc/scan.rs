//! A gRPC message's protobuf bytes walked before prost decodes them, allocating nothing: what
//! they would decode into (an upper bound, in bytes) and how many entries its counted fields
//! hold. Protobuf lets two bytes on the wire (an empty entry of a repeated field) become a
//! struct of a hundred bytes or more, so a message is judged by what it decodes into, not only
//! by its length (`super::intake`).
//!
//! The bound follows prost's decoding block by block: each string's bytes, each repeated
//! field's vector and each map's hash table as they stand after prost pushed or inserted every
//! entry, each block as malloc holds it. `server/tests/grpc_decoded_bound.rs` and the parser
//! properties decode messages under an allocator that counts those blocks and hold the bound
//! to it.
//!
//! Each message type the services take is described by a `Schema`: its fields' numbers and
//! kinds, and its struct's size as prost lays it out. Fields the schema does not list are
//! unknown to prost too, which skips them without allocating.

use std::collections::HashMap;
use std::mem::size_of;

use super::proto::duet::v1 as duet;
use super::proto::inference;
use super::proto::inference::model_infer_request as infer;

/// A message type: its struct's size and its fields.
#[derive(Debug)]
pub struct Schema {
    pub name: &'static str,
    /// The struct's own bytes as an element of a repeated field (a vector's element; for a
    /// map's entry, its key and value together).
    pub size: usize,
    /// An entry of a protobuf map: the entries of one map live in one hash table, not a vector.
    pub map: bool,
    pub fields: &'static [Field],
}

#[derive(Debug)]
pub struct Field {
    pub number: u32,
    pub kind: Kind,
    /// An entry is a new element (a repeated field or a map), not a field merged into its
    /// struct.
    pub repeated: bool,
    /// Counted for the caller (`Scan::counts`), by this name.
    pub counted: Option<&'static str>,
}

#[derive(Debug)]
pub enum Kind {
    Message(&'static Schema),
    /// A string or bytes: its bytes on the heap (`Vec`, `String`; a `Bytes` shares the
    /// message's buffer, counted as a copy to stay an upper bound).
    Bytes,
    /// A number of `width` bytes in memory, one per value on the wire (packed or not): a varint
    /// (`fixed` 0) or a value of `fixed` bytes.
    Scalar {
        width: usize,
        fixed: usize,
    },
}

/// What a message decodes into.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes its decoded message holds at most: its structs, their strings, its vectors'
    /// and maps' storage as they grow while prost pushes entry after entry, each block as the
    /// allocator holds it (`heap`).
    pub decoded_bytes: usize,
    /// Entries of the counted fields, by name.
    pub counts: HashMap<&'static str, usize>,
}

/// Why a message cannot be decoded at all: where the wire format breaks.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// The most fields a schema has (one count of entries each while its message is walked).
const MAX_FIELDS: usize = 8;

/// An element of a repeated string or bytes field: a `Vec<u8>`/`String` or a `Bytes`.
const BYTES_ELEMENT: usize = {
    let (vec, shared) = (size_of::<Vec<u8>>(), size_of::<prost::bytes::Bytes>());
    if vec > shared { vec } else { shared }
};

/// What the allocator holds for a block of `size` bytes: glibc's malloc adds an 8-byte header,
/// rounds to 16 bytes and takes at least 32; past its mmap threshold, whole pages. Most other
/// allocators hold no more (their size classes round by less than the header and rounding
/// here add), so this is what the scan charges each block.
const fn heap(size: usize) -> usize {
    if size == 0 {
        0
    } else if size >= 128 * 1024 {
        (size + 16).next_multiple_of(4096)
    } else {
        let chunk = (size + 8).next_multiple_of(16);
        if chunk < 32 { 32 } else { chunk }
    }
}

/// A string or bytes field of `len` bytes: prost reserves exactly its length, and a vector of
/// bytes takes at least 8.
const fn string_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        heap(if len < 8 { 8 } else { len })
    }
}

/// A vector of `n` elements of `size` bytes, pushed one at a time as prost decodes them: its
/// capacity doubles from the least the standard library gives (8 for bytes, 4 up to 1 KiB,
/// else 1).
const fn vec_bytes(n: usize, size: usize) -> usize {
    if n == 0 || size == 0 {
        return 0;
    }
    let least = if size == 1 {
        8
    } else if size <= 1024 {
        4
    } else {
        1
    };
    let capacity = (if n > least { n } else { least }).next_power_of_two();
    heap(capacity.saturating_mul(size))
}

/// A hash table (`std`'s, hashbrown's) of `n` entries of `size` bytes, inserted one at a
/// time: buckets a power of two from 4 (three entries) and at most 7/8 full from 8, the
/// entries then one control byte per bucket and a 16-byte group, in one block.
const fn table_bytes(n: usize, size: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut buckets = 4;
    while (if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }) < n
    {
        buckets *= 2;
    }
    const GROUP: usize = 16;
    heap(
        buckets
            .saturating_mul(size)
            .next_multiple_of(GROUP)
            .saturating_add(buckets + GROUP),
    )
}

/// What the `n` entries of a repeated `field` of one message hold besides their own heap.
fn storage(field: &Field, n: usize) -> usize {
    if !field.repeated {
        return 0;
    }
    match field.kind {
        Kind::Message(child) if child.map => table_bytes(n, child.size),
        Kind::Message(child) => vec_bytes(n, child.size),
        Kind::Bytes => vec_bytes(n, BYTES_ELEMENT),
        Kind::Scalar { width, .. } => vec_bytes(n, width),
    }
}

const fn field(number: u32, kind: Kind) -> Field {
    Field {
        number,
        kind,
        repeated: false,
        counted: None,
    }
}

const fn repeated(number: u32, kind: Kind) -> Field {
    Field {
        number,
        kind,
        repeated: true,
        counted: None,
    }
}

const fn counted(number: u32, kind: Kind, name: &'static str) -> Field {
    Field {
        number,
        kind,
        repeated: true,
        counted: Some(name),
    }
}

const fn map_entry<V>(name: &'static str, value: &'static [Field]) -> Schema {
    Schema {
        name,
        size: size_of::<(String, V)>(),
        map: true,
        fields: value,
    }
}

// duet.v1.Predictor/Predict
static FEATURE_VALUE: Schema = Schema {
    name: "FeatureValue",
    size: size_of::<duet::FeatureValue>(),
    map: false,
    fields: &[
        field(1, Kind::Scalar { width: 0, fixed: 8 }),
        field(2, Kind::Bytes),
    ],
};
static FEATURES_ENTRY: Schema = map_entry::<duet::FeatureValue>(
    "Features.ValuesEntry",
    &[
        field(1, Kind::Bytes),
        field(2, Kind::Message(&FEATURE_VALUE)),
    ],
);
static FEATURES: Schema = Schema {
    name: "Features",
    size: size_of::<duet::Features>(),
    map: false,
    fields: &[counted(1, Kind::Message(&FEATURES_ENTRY), "features")],
};
static JOB: Schema = Schema {
    name: "Job",
    size: size_of::<duet::Job>(),
    map: false,
    fields: &[field(1, Kind::Bytes), field(2, Kind::Message(&FEATURES))],
};
static PAIR: Schema = Schema {
    name: "Pair",
    size: size_of::<duet::Pair>(),
    map: false,
    fields: &[
        field(1, Kind::Message(&JOB)),
        field(2, Kind::Message(&JOB)),
        field(3, Kind::Bytes),
        field(6, Kind::Bytes),
    ],
};
static GROUP: Schema = Schema {
    name: "Group",
    size: size_of::<duet::Group>(),
    map: false,
    fields: &[
        counted(1, Kind::Message(&JOB), "group_jobs"),
        field(2, Kind::Bytes),
        repeated(3, Kind::Scalar { width: 8, fixed: 8 }),
        field(4, Kind::Bytes),
    ],
};
/// `duet.v1.PredictRequest`: `pairs`, `groups` and the groups' jobs counted.
pub static PREDICT_REQUEST: Schema = Schema {
    name: "PredictRequest",
    size: size_of::<duet::PredictRequest>(),
    map: false,
    fields: &[
        field(1, Kind::Bytes),
        counted(2, Kind::Message(&PAIR), "pairs"),
        counted(3, Kind::Message(&GROUP), "groups"),
    ],
};

// inference.GRPCInferenceService/ModelInfer
static PARAMETER: Schema = Schema {
    name: "InferParameter",
    size: size_of::<inference::InferParameter>(),
    map: false,
    fields: &[field(3, Kind::Bytes)],
};
static PARAMETERS_ENTRY: Schema = map_entry::<inference::InferParameter>(
    "ParametersEntry",
    &[field(1, Kind::Bytes), field(2, Kind::Message(&PARAMETER))],
);
static CONTENTS: Schema = Schema {
    name: "InferTensorContents",
    size: size_of::<inference::InferTensorContents>(),
    map: false,
    fields: &[
        repeated(1, Kind::Scalar { width: 1, fixed: 0 }),
        repeated(2, Kind::Scalar { width: 4, fixed: 0 }),
        repeated(3, Kind::Scalar { width: 8, fixed: 0 }),
        repeated(4, Kind::Scalar { width: 4, fixed: 0 }),
        repeated(5, Kind::Scalar { width: 8, fixed: 0 }),
        repeated(6, Kind::Scalar { width: 4, fixed: 4 }),
        repeated(7, Kind::Scalar { width: 8, fixed: 8 }),
        repeated(8, Kind::Bytes),
    ],
};
static INPUT: Schema = Schema {
    name: "InferInputTensor",
    size: size_of::<infer::InferInputTensor>(),
    map: false,
    fields: &[
        field(1, Kind::Bytes),
        field(2, Kind::Bytes),
        repeated(3, Kind::Scalar { width: 8, fixed: 0 }),
        repeated(4, Kind::Message(&PARAMETERS_ENTRY)),
        field(5, Kind::Message(&CONTENTS)),
    ],
};
static OUTPUT: Schema = Schema {
    name: "InferRequestedOutputTensor",
    size: size_of::<infer::InferRequestedOutputTensor>(),
    map: false,
    fields: &[
        field(1, Kind::Bytes),
        repeated(2, Kind::Message(&PARAMETERS_ENTRY)),
    ],
};
/// `inference.ModelInferRequest`.
pub static MODEL_INFER_REQUEST: Schema = Schema {
    name: "ModelInferRequest",
    size: size_of::<inference::ModelInferRequest>(),
    map: false,
    fields: &[
        field(1, Kind::Bytes),
        field(2, Kind::Bytes),
        field(3, Kind::Bytes),
        repeated(4, Kind::Message(&PARAMETERS_ENTRY)),
        counted(5, Kind::Message(&INPUT), "inputs"),
        repeated(6, Kind::Message(&OUTPUT)),
        repeated(7, Kind::Bytes),
    ],
};
/// A request of a model's name and version (`ModelReady`, `ModelMetadata`).
pub static MODEL_NAME_REQUEST: Schema = Schema {
    name: "ModelMetadataRequest",
    size: size_of::<inference::ModelMetadataRequest>(),
    map: false,
    fields: &[field(1, Kind::Bytes), field(2, Kind::Bytes)],
};
/// A request without fields (`ServerLive`, `ServerReady`, `ServerMetadata`): every field is
/// unknown and skipped.
pub static EMPTY_REQUEST: Schema = Schema {
    name: "Empty",
    size: 0,
    map: false,
    fields: &[],
};

/// Walks `bytes` as a message of `schema`.
pub fn scan(schema: &Schema, bytes: &[u8]) -> Result<Scan, Malformed> {
    let mut out = Scan {
        decoded_bytes: schema.size,
        counts: HashMap::new(),
    };
    walk(schema, bytes, 0, &mut out)?;
    Ok(out)
}

/// Deeper than this, prost refuses a message too (its recursion limit is 100).
const MAX_DEPTH: usize = 32;

fn walk(schema: &Schema, mut bytes: &[u8], depth: usize, out: &mut Scan) -> Result<(), Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed(format!("{}: nested too deep", schema.name)));
    }
    let add = |out: &mut Scan, n: usize| {
        out.decoded_bytes = out.decoded_bytes.saturating_add(n);
    };
    // The entries of each repeated field of this message, in the order of `schema.fields`:
    // their vector's or table's storage is charged once the message is walked.
    let mut entries = [0usize; MAX_FIELDS];
    while !bytes.is_empty() {
        let key = varint(&mut bytes).ok_or_else(|| truncated(schema))?;
        let number = u32::try_from(key >> 3).map_err(|_| truncated(schema))?;
        let wire = key & 7;
        if number == 0 {
            return Err(Malformed(format!("{}: field number 0", schema.name)));
        }
        let position = schema.fields.iter().position(|f| f.number == number);
        let field = position.map(|p| &schema.fields[p]);
        if let Some(name) = field.and_then(|f| f.counted) {
            *out.counts.entry(name).or_insert(0) += 1;
        }
        // `n` more entries of the field, where it is repeated.
        let mut entry = |n: usize| {
            if let (Some(p), Some(Field { repeated: true, .. })) = (position, field)
                && let Some(count) = entries.get_mut(p)
            {
                *count = count.saturating_add(n);
            }
        };
        match wire {
            0 => {
                varint(&mut bytes).ok_or_else(|| truncated(schema))?;
                entry(1);
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if bytes.len() < n {
                    return Err(truncated(schema));
                }
                bytes = &bytes[n..];
                entry(1);
            }
            2 => {
                let inner = length_delimited(schema, &mut bytes)?;
                match field {
                    None => {}
                    Some(f) => match f.kind {
                        Kind::Message(child) => {
                            entry(1);
                            walk(child, inner, depth + 1, out)?;
                        }
                        Kind::Bytes => {
                            entry(1);
                            add(out, string_bytes(inner.len()));
                        }
                        // Packed: one value per varint (a byte under 0x80 ends one), or per
                        // fixed-width value.
                        Kind::Scalar { fixed, .. } => entry(if fixed == 0 {
                            inner.iter().filter(|&&b| b < 0x80).count()
                        } else {
                            inner.len().div_ceil(fixed)
                        }),
                    },
                }
            }
            // A group (proto2's, deprecated): duet declares none, and prost skips an unknown
            // one, so it is skipped here too, whatever it holds.
            3 => bytes = skip_group(schema, bytes, number, depth + 1)?,
            _ => {
                return Err(Malformed(format!(
                    "{}: field {number} has wire type {wire}, which duet does not accept",
                    schema.name
                )));
            }
        }
    }
    for (field, &n) in schema.fields.iter().zip(&entries) {
        add(out, storage(field, n));
    }
    Ok(())
}

/// The bytes after the group `number` that `bytes` starts inside (after its start key), nested
/// groups included.
fn skip_group<'a>(
    schema: &Schema,
    mut bytes: &'a [u8],
    number: u32,
    depth: usize,
) -> Result<&'a [u8], Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed(format!("{}: nested too deep", schema.name)));
    }
    loop {
        let key = varint(&mut bytes).ok_or_else(|| truncated(schema))?;
        let inner = u32::try_from(key >> 3).map_err(|_| truncated(schema))?;
        match key & 7 {
            0 => {
                varint(&mut bytes).ok_or_else(|| truncated(schema))?;
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                bytes = bytes.get(n..).ok_or_else(|| truncated(schema))?;
            }
            2 => {
                length_delimited(schema, &mut bytes)?;
            }
            3 => bytes = skip_group(schema, bytes, inner, depth + 1)?,
            4 if inner == number => return Ok(bytes),
            wire => {
                return Err(Malformed(format!(
                    "{}: group {number} holds field {inner} of wire type {wire}",
                    schema.name
                )));
            }
        }
    }
}

/// The value of a length-delimited field that `bytes` starts at (its length, then that many
/// bytes), taken off the front of `bytes`.
fn length_delimited<'a>(schema: &Schema, bytes: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    let len = varint(bytes).ok_or_else(|| truncated(schema))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= bytes.len())
        .ok_or_else(|| truncated(schema))?;
    let (value, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(value)
}

fn truncated(schema: &Schema) -> Malformed {
    Malformed(format!("{}: the message ends inside a field", schema.name))
}

/// A base-128 varint, at most ten bytes.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// Found by `scripts/fuzz.sh` (grpc_scan): an unknown field sent as a group, which prost
    /// skips, was refused. The fuzzer's input, and a nested group before a pair.
    #[test]
    fn an_unknown_group_is_skipped_as_prost_skips_it() {
        let found = [
            10, 10, 68, 118, 99, 80, 10, 10, 8, 99, 8, 99, 121, 99, 5, 110, 103, 108, 101, 209, 97,
            115, 116, 89, 99, 101, 52, 5, 35, 46, 10, 101,
        ];
        let decoded = crate::grpc::proto::duet::v1::PredictRequest::decode(&found[..]);
        let walked = scan(&PREDICT_REQUEST, &found);
        assert_eq!(decoded.is_ok(), walked.is_ok(), "{decoded:?} {walked:?}");
        // Field 15 as a group holding a varint and a nested group 16, then one pair.
        let message = [0x7b, 0x08, 0x01, 0x83, 0x01, 0x84, 0x01, 0x7c, 0x12, 0x00];
        let decoded = crate::grpc::proto::duet::v1::PredictRequest::decode(&message[..])
            .expect("prost skips the group");
        let walked = scan(&PREDICT_REQUEST, &message).expect("so does the walker");
        assert_eq!(decoded.pairs.len(), 1);
        assert_eq!(walked.counts.get("pairs"), Some(&1));
        // A group that never ends is refused.
        assert!(scan(&PREDICT_REQUEST, &[0x7b, 0x08, 0x01]).is_err());
    }

    fn pair(a: &str, b: &str) -> duet::Pair {
        duet::Pair {
            a: Some(duet::Job {
                job: Some(duet::job::Job::Workload(a.into())),
            }),
            b: Some(duet::Job {
                job: Some(duet::job::Job::Workload(b.into())),
            }),
            mode: "space".into(),
            share_a: None,
            share_b: None,
            gpu: Some("v100".into()),
        }
    }

    #[test]
    fn a_predict_request_counts_its_pairs_and_bounds_its_memory() {
        let group = duet::Group {
            jobs: (0..4)
                .map(|i| duet::Job {
                    job: Some(duet::job::Job::Workload(format!("g{i}"))),
                })
                .collect(),
            mode: "mps".into(),
            shares: vec![25.0; 4],
            gpu: None,
        };
        let request = duet::PredictRequest {
            gpu: None,
            pairs: (0..100)
                .map(|i| pair(&format!("w{i}"), "resnet-50-bs64"))
                .collect(),
            groups: vec![group; 10],
        };
        let bytes = request.encode_to_vec();
        let s = scan(&PREDICT_REQUEST, &bytes).expect("scan");
        assert_eq!(s.counts["pairs"], 100);
        assert_eq!((s.counts["groups"], s.counts["group_jobs"]), (10, 40));
        let decoded = size_of::<duet::PredictRequest>()
            + 100 * size_of::<duet::Pair>()
            + 10 * (size_of::<duet::Group>() + 4 * (size_of::<duet::Job>() + 8));
        assert!(
            s.decoded_bytes >= decoded,
            "{} < {decoded}",
            s.decoded_bytes
        );
        assert!(s.decoded_bytes < 4 * decoded, "{}", s.decoded_bytes);
    }

    #[test]
    fn empty_entries_cost_their_structs_not_their_bytes() {
        // 1,000 empty pairs: two bytes each on the wire.
        let bytes: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 1000)
            .flatten()
            .collect();
        let s = scan(&PREDICT_REQUEST, &bytes).expect("scan");
        assert_eq!(s.counts["pairs"], 1000);
        assert!(s.decoded_bytes >= 1000 * size_of::<duet::Pair>());
        let decoded = duet::PredictRequest::decode(&bytes[..]).expect("prost decodes it");
        assert_eq!(decoded.pairs.len(), 1000);
        // Empty inputs of ModelInfer alike.
        let bytes: Vec<u8> = std::iter::repeat_n([0x2au8, 0x00], 1000)
            .flatten()
            .collect();
        let s = scan(&MODEL_INFER_REQUEST, &bytes).expect("scan");
        assert_eq!(s.counts["inputs"], 1000);
        assert!(s.decoded_bytes >= 1000 * size_of::<infer::InferInputTensor>());
    }

    #[test]
    fn features_inline_and_unknown_fields() {
        let mut values = HashMap::new();
        for k in 0..20 {
            values.insert(
                format!("feature_{k}"),
                duet::FeatureValue {
                    value: Some(duet::feature_value::Value::Number(1.0)),
                },
            );
        }
        let mut p = pair("a", "b");
        p.a = Some(duet::Job {
            job: Some(duet::job::Job::Features(duet::Features { values })),
        });
        let mut bytes = duet::PredictRequest {
            gpu: None,
            pairs: vec![p],
            groups: Vec::new(),
        }
        .encode_to_vec();
        // An unknown field (99, bytes) is skipped, as prost skips it.
        bytes.extend_from_slice(&[0x9a, 0x06, 0x03, b'x', b'y', b'z']);
        let s = scan(&PREDICT_REQUEST, &bytes).expect("scan");
        assert_eq!(s.counts["pairs"], 1);
        assert_eq!(s.counts["features"], 20);
        assert!(duet::PredictRequest::decode(&bytes[..]).is_ok());
    }

    #[test]
    fn every_schema_fits_the_counts_of_its_walk() {
        fn check(schema: &Schema) {
            assert!(schema.fields.len() <= MAX_FIELDS, "{}", schema.name);
            for f in schema.fields {
                if let Kind::Message(child) = f.kind {
                    check(child);
                }
            }
        }
        for schema in [
            &PREDICT_REQUEST,
            &MODEL_INFER_REQUEST,
            &MODEL_NAME_REQUEST,
            &EMPTY_REQUEST,
        ] {
            check(schema);
        }
    }

    #[test]
    fn storage_grows_as_vectors_and_tables_do() {
        // A vector of 1 to 4 elements of 24 bytes holds 4; of 5, 8.
        assert_eq!(vec_bytes(1, 24), heap(96));
        assert_eq!(vec_bytes(4, 24), heap(96));
        assert_eq!(vec_bytes(5, 24), heap(192));
        assert_eq!(vec_bytes(3, 1), heap(8));
        assert_eq!(vec_bytes(0, 24), 0);
        // A table of 1 to 3 entries has 4 buckets, of 4 to 7 eight, of 8 to 14 sixteen.
        assert_eq!(table_bytes(1, 56), heap(4 * 56 + 4 + 16));
        assert_eq!(table_bytes(3, 56), heap(4 * 56 + 4 + 16));
        assert_eq!(table_bytes(4, 56), heap(8 * 56 + 8 + 16));
        assert_eq!(table_bytes(14, 56), heap(16 * 56 + 16 + 16));
        assert_eq!(table_bytes(15, 56), heap(32 * 56 + 32 + 16));
        // Blocks as malloc holds them.
        assert_eq!((heap(1), heap(24), heap(25), heap(40)), (32, 32, 48, 48));
        assert_eq!(string_bytes(0), 0);
        assert_eq!(string_bytes(1), 32);
    }

    #[test]
    fn broken_wire_is_refused() {
        // A length past the end, a truncated varint, a group, field number 0.
        for bytes in [
            &[0x12u8, 0x05, 0x00][..],
            &[0x12, 0x80][..],
            &[0x13][..],
            &[0x02, 0x00][..],
        ] {
            let e = scan(&PREDICT_REQUEST, bytes).expect_err("malformed");
            assert!(e.0.contains("PredictRequest"), "{}", e.0);
        }
    }

    #[test]
    fn packed_numbers_count_their_values() {
        let contents = inference::InferTensorContents {
            fp32_contents: vec![1.0; 1000],
            int64_contents: vec![1; 100],
            ..Default::default()
        };
        let request = inference::ModelInferRequest {
            inputs: vec![infer::InferInputTensor {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![100, 10],
                parameters: HashMap::new(),
                contents: Some(contents),
            }],
            ..Default::default()
        };
        let bytes = request.encode_to_vec();
        let s = scan(&MODEL_INFER_REQUEST, &bytes).expect("scan");
        assert!(s.decoded_bytes >= 4000 + 800, "{}", s.decoded_bytes);
        assert!(s.decoded_bytes < 40_000, "{}", s.decoded_bytes);
    }
}
