//! The shape of the code, checked: inside each duet crate, no circle of modules that import
//! each other through `crate::` paths (a module's own tests aside), and no source file over
//! `MAX_LINES` lines outside generated code. A module circle means no part of it can be
//! understood, tested or moved without the rest; a file that long holds more than one job.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest source file, in lines.
const MAX_LINES: usize = 900;

/// The source languages whose files are held to `MAX_LINES`.
const SOURCE_EXTENSIONS: &[&str] = &["rs", "py", "sh", "go", "proto"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Files under `dir`, skipping build output, hidden folders and generated code.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name.starts_with('.')
                || matches!(name.as_str(), "target" | "generated" | "node_modules")
            {
                continue;
            }
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A crate's modules: module path (`routes::predict`; the crate root is ``) to its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut all = Vec::new();
    files(src, &mut all);
    let mut modules = BTreeMap::new();
    for file in all {
        if file.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let relative = file.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        if parts
            .last()
            .is_some_and(|p| matches!(p.as_str(), "mod" | "lib" | "main"))
        {
            parts.pop();
        }
        modules.insert(parts.join("::"), file);
    }
    modules
}

/// The source without comments and without a trailing `#[cfg(test)] mod ... {` block (a
/// module's own tests may import anything).
fn code(source: &str) -> String {
    let mut kept = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// Every path a `crate::` use tree names, expanded: `crate::{a, b::{c, d}}` gives `a`, `b::c`,
/// `b::d`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find("crate::") {
        let start = at + found;
        at = start + "crate::".len();
        // `foo_crate::` or `$crate::` is not this crate.
        if start > 0 && {
            let before = bytes[start - 1];
            before.is_ascii_alphanumeric() || before == b'_' || before == b'$'
        } {
            continue;
        }
        let mut chars = code[at..].char_indices().peekable();
        tree(&code[at..], &mut chars, Vec::new(), &mut paths);
    }
    paths
}

/// Reads one use tree from `chars`, prefixing `prefix`.
fn tree(
    text: &str,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    let mut path = prefix;
    loop {
        while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek().copied() {
            Some((_, '{')) => {
                chars.next();
                loop {
                    tree(text, chars, path.clone(), out);
                    while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                        chars.next();
                    }
                    match chars.next() {
                        Some((_, ',')) => {
                            while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                                chars.next();
                            }
                            if chars.peek().is_some_and(|(_, c)| *c == '}') {
                                chars.next();
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            }
            Some((start, c)) if c.is_alphanumeric() || c == '_' => {
                let mut end = start;
                while let Some((i, c)) = chars.peek().copied() {
                    if c.is_alphanumeric() || c == '_' {
                        end = i + c.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                path.push(text[start..end].to_string());
                if text[end..].starts_with("::") {
                    chars.next();
                    chars.next();
                    continue;
                }
                // `x as y` or the end of this path.
                while chars
                    .peek()
                    .is_some_and(|(_, c)| !matches!(c, ',' | '}' | ';' | '(' | ')'))
                {
                    if chars.peek().is_some_and(|(_, c)| *c == '{') {
                        break;
                    }
                    chars.next();
                }
                out.push(path);
                return;
            }
            _ => {
                if !path.is_empty() {
                    out.push(path);
                }
                return;
            }
        }
    }
}

/// The module a path lands in: the longest prefix that is a module of the crate.
fn module_of(path: &[String], modules: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains_key(candidate))
}

/// Module -> the modules it imports through `crate::`.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let source = std::fs::read_to_string(file).expect("readable source");
        let imports: BTreeSet<String> = crate_paths(&code(&source))
            .iter()
            .filter_map(|path| module_of(path, &modules))
            .filter(|target| target != module && !target.is_empty())
            .collect();
        graph.insert(module.clone(), imports);
    }
    graph
}

/// The graph's strongly connected components of more than one module (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The workspace's crates: folders with a `Cargo.toml` and a `src`.
fn crates() -> Vec<PathBuf> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root())
        .expect("the workspace root")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    let crates = crates();
    assert!(
        crates.iter().any(|c| c.ends_with("server")),
        "the server crate is among {crates:?}"
    );
    let mut found = Vec::new();
    for krate in &crates {
        let graph = import_graph(&krate.join("src"));
        for circle in circles(&graph) {
            let edges: Vec<String> = circle
                .iter()
                .map(|m| {
                    let inside: Vec<&str> = graph[m]
                        .iter()
                        .filter(|t| circle.contains(t))
                        .map(String::as_str)
                        .collect();
                    format!("{m} -> {}", inside.join(", "))
                })
                .collect();
            found.push(format!(
                "{}: {}",
                krate.file_name().unwrap_or_default().to_string_lossy(),
                edges.join("; ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other in a circle:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let mut all = Vec::new();
    files(&root(), &mut all);
    let mut long: Vec<String> = all
        .iter()
        .filter(|f| {
            f.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| SOURCE_EXTENSIONS.contains(&e))
        })
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines (split them by what each part does):\n{}",
        long.join("\n")
    );
}

/// The checker itself finds what it looks for, so that the tests above cannot pass by reading
/// nothing.
#[test]
fn the_checker_sees_use_trees_and_circles() {
    let code = code(
        "use crate::{a, b::{c, d as e}};\nfn f() { crate::x::y(); }\n// crate::z\n\
         #[cfg(test)]\nmod tests { use crate::w; }\n",
    );
    let paths: Vec<String> = crate_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["a", "b::c", "b::d", "x::y"]);

    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &["a"][..]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.iter().map(|t| (*t).to_string()).collect()))
    .collect();
    assert_eq!(circles(&graph), [["a", "b", "c"]]);

    let server = import_graph(&root().join("server/src"));
    assert!(
        server["routes::predict"].contains("service::predict"),
        "the server's imports are read: {:?}",
        server["routes::predict"]
    );
}
