//! The CSV importer: the bytes up to the first NUL are `workloads.csv`, the rest `pairs.csv`.
//! Any files are imported as a dataset that validates, or refused naming one of them.
#![no_main]

use std::path::Path;

use duet_core::dataset::Provenance;
use duet_core::import::csv::{CsvImport, import};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (workloads_bytes, pairs_bytes) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let dir = std::env::temp_dir().join(format!("duet-fuzz-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let (workloads, pairs) = (dir.join("workloads.csv"), dir.join("pairs.csv"));
    std::fs::write(&workloads, workloads_bytes).expect("write");
    std::fs::write(&pairs, pairs_bytes).expect("write");
    let options = CsvImport {
        name: "fuzzed".into(),
        description: "fuzzed".into(),
        provenance: Provenance {
            source: "fuzz".into(),
            gpu: "v100".into(),
            driver: None,
            host: None,
            measured_by: "duet".into(),
            tool: "csv_import".into(),
            command: None,
            date: "2026-12-04".into(),
            licence: "MIT".into(),
            licence_text: None,
        },
    };
    match import(&workloads, &pairs, &options) {
        Ok(dataset) => dataset
            .validate(Path::new("imported"))
            .expect("an import validates"),
        Err(e) => {
            let message = format!("{e:#}");
            assert!(
                message.contains("workloads.csv") || message.contains("pairs.csv"),
                "{message}"
            );
        }
    }
});
