//! The CSV importer (workloads, pairs and groups) over thousands of mutated files (bytes flipped, cut, repeated, cells and
//! separators spliced in), with a fixed seed: it never panics, a refusal names the file it
//! concerns, and what it accepts is a dataset that validates.

use std::path::Path;

use duet_core::dataset::Provenance;
use duet_core::import::csv::{CsvImport, import};
use duet_core::rng::Rng;

const WORKLOADS: &str = "workload,kind,solo_throughput,batch_size,framework:categorical\n\
resnet,train,11.2,64,torch\n\
bert,infer,120.5,8,torch\n\
a3c,train,3.4,,jax\n";

const PAIRS: &str = "a,b,mode,throughput_a,throughput_b,share_a,share_b,status,l2_hit_rate:numeric\n\
resnet,bert,mps,6.1,70.2,50,50,,81\n\
resnet,a3c,timeslice,5.0,1.9,,,ok,75\n\
bert,bert,mps,60,61,40,60,,90\n\
a3c,bert,mps,0,0,30,70,oom,\n";

const GROUPS: &str = "group,workload,mode,share,throughput,status\n\
g1,resnet,mps,30,4.0,\n\
g1,bert,mps,30,50.5,\n\
g1,a3c,mps,30,1.1,\n\
g2,resnet,timeslice,,3.0,ok\n\
g2,resnet,timeslice,,3.1,ok\n\
g2,bert,timeslice,,40,ok\n";

const TOKENS: &[&str] = &[
    ",",
    "\n",
    "\"",
    "\r\n",
    "-1",
    "1e400",
    "NaN",
    "inf",
    "0",
    "",
    "mps",
    "space",
    "ok",
    "oom",
    "resnet",
    "\u{1F600}",
    ":numeric",
    ":categorical",
    "\"a,b\"",
    ",,,,",
    "-0.0",
];

fn mutate(draw: &mut Rng, text: &str) -> Vec<u8> {
    let mut out = text.as_bytes().to_vec();
    for _ in 0..=draw.below(3) {
        let at = draw.below(out.len() + 1);
        match draw.below(5) {
            0 if !out.is_empty() => {
                let i = draw.below(out.len());
                out[i] ^= 1 << draw.below(8);
            }
            1 => {
                let end = (at + draw.below(12)).min(out.len());
                out.drain(at..end);
            }
            2 => {
                let end = (at + draw.below(40)).min(out.len());
                let copy = out[at..end].to_vec();
                out.splice(at..at, copy);
            }
            _ => {
                let token = TOKENS[draw.below(TOKENS.len())].as_bytes();
                out.splice(at..at, token.iter().copied());
            }
        }
    }
    out
}

fn options() -> CsvImport {
    CsvImport {
        name: "mutated".into(),
        description: "a property test's input".into(),
        provenance: Provenance {
            source: "duet's tests".into(),
            gpu: "v100".into(),
            driver: None,
            host: None,
            measured_by: "duet".into(),
            tool: "csv_properties".into(),
            command: None,
            date: "2026-12-04".into(),
            licence: "MIT".into(),
            licence_text: None,
        },
    }
}

#[test]
fn mutated_csv_files_are_imported_or_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let (workloads, pairs, groups) = (
        dir.path().join("workloads.csv"),
        dir.path().join("pairs.csv"),
        dir.path().join("groups.csv"),
    );
    let write = |path: &Path, bytes: &[u8]| std::fs::write(path, bytes).expect("write");
    write(&workloads, WORKLOADS.as_bytes());
    write(&pairs, PAIRS.as_bytes());
    write(&groups, GROUPS.as_bytes());
    let whole =
        import(&workloads, &pairs, Some(&groups), &options()).expect("the unmutated files import");
    assert_eq!(whole.groups.len(), 2);
    let mut draw = Rng::new(5);
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..3_000 {
        let clean = |text: &str| text.as_bytes().to_vec();
        let (w, p, g) = match round % 4 {
            0 => (mutate(&mut draw, WORKLOADS), clean(PAIRS), clean(GROUPS)),
            1 => (clean(WORKLOADS), mutate(&mut draw, PAIRS), clean(GROUPS)),
            2 => (clean(WORKLOADS), clean(PAIRS), mutate(&mut draw, GROUPS)),
            _ => (
                mutate(&mut draw, WORKLOADS),
                mutate(&mut draw, PAIRS),
                mutate(&mut draw, GROUPS),
            ),
        };
        write(&workloads, &w);
        write(&pairs, &p);
        write(&groups, &g);
        match import(&workloads, &pairs, Some(&groups), &options()) {
            Ok(dataset) => {
                accepted += 1;
                dataset
                    .validate(Path::new("imported"))
                    .unwrap_or_else(|e| panic!("an accepted import does not validate: {e}"));
            }
            Err(e) => {
                refused += 1;
                let message = format!("{e:#}");
                assert!(
                    ["workloads.csv", "pairs.csv", "groups.csv"]
                        .iter()
                        .any(|f| message.contains(f)),
                    "a refusal that names no file: {message}"
                );
            }
        }
    }
    eprintln!("3,000 mutated imports: {accepted} accepted, {refused} refused");
    assert!(accepted > 0 && refused > 0);
}
