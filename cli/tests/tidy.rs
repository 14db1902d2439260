//! The shape of the code, checked: inside each duet crate, no circle of modules that import
//! each other through `crate::`, `super::` or `self::` paths (test-only modules aside; a folder
//! module naming its own children by their bare names, the facade of `store/` or `grpc/`, is
//! not read as an import), and no source file over
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

/// The source without comments and without its `#[cfg(test)]` modules (a module's own tests
/// may import anything): an inline `mod tests { ... }` is skipped to its closing brace, a
/// `mod tests;` declaration is dropped (its file is skipped as a test module).
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
            let declaration = lines.next().unwrap_or_default();
            if declaration.contains('{') {
                let mut depth = brace_balance(declaration);
                while depth > 0 {
                    let Some(inner) = lines.next() else { break };
                    depth += brace_balance(inner);
                }
            }
            continue;
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

/// Opening braces less closing ones on a line (comments and strings are not told apart: test
/// modules of this workspace keep their braces balanced per line well enough for this).
fn brace_balance(line: &str) -> i64 {
    let line = line.find("//").map_or(line, |at| &line[..at]);
    line.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The modules declared `#[cfg(test)] mod NAME;` in `source`: test-only files.
fn test_module_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]")
            && let Some(next) = lines.peek()
            && let Some(rest) = next.trim_start().strip_prefix("mod ")
            && let Some(name) = rest.strip_suffix(';')
        {
            names.push(name.trim().to_string());
        }
    }
    names
}

/// Every path a `crate::` use tree names, expanded: `crate::{a, b::{c, d}}` gives `a`, `b::c`,
/// `b::d`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    rooted_paths(code, "crate::", &[])
}

/// Every path of this crate that `code`, the source of module `module` (its path from the
/// crate root), names through `crate::`,
/// `super::` or `self::`, from the crate root.
fn module_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let parent = &module[..module.len().saturating_sub(1)];
    let mut paths = rooted_paths(code, "crate::", &[]);
    paths.extend(rooted_paths(code, "super::", parent));
    paths.extend(rooted_paths(code, "self::", module));
    paths
}

/// The paths after each `root` (not part of a longer name) in `code`, each prefixed by `prefix`.
fn rooted_paths(code: &str, root: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find(root) {
        let start = at + found;
        at = start + root.len();
        // `foo_crate::`, `$crate::` or `a::super::` is not a root here.
        if start > 0 && {
            let before = bytes[start - 1];
            before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before == b':'
        } {
            continue;
        }
        let mut chars = code[at..].char_indices().peekable();
        tree(&code[at..], &mut chars, prefix.to_vec(), &mut paths);
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
    let mut modules = modules(src);
    // Test-only files (`#[cfg(test)] mod tests;`) are not part of the graph.
    let mut tests = Vec::new();
    for (module, file) in &modules {
        let source = std::fs::read_to_string(file).expect("readable source");
        for name in test_module_names(&source) {
            tests.push(if module.is_empty() {
                name
            } else {
                format!("{module}::{name}")
            });
        }
    }
    for test in &tests {
        modules.remove(test);
    }
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let source = std::fs::read_to_string(file).expect("readable source");
        let own: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(str::to_string).collect()
        };
        let imports: BTreeSet<String> = module_paths(&code(&source), &own)
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
    let code_of = code;
    let code = code(
        "use crate::{a, b::{c, d as e}};\nfn f() { crate::x::y(); }\n// crate::z\n\
         #[cfg(test)]\nmod tests { use crate::w; }\n",
    );
    let paths: Vec<String> = crate_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["a", "b::c", "b::d", "x::y"]);
    let child = code_of("use super::*;\nuse super::sibling::Item;\nfn f() { self::inner::g(); }\n");
    let module = ["parent".to_string(), "child".to_string()];
    let paths: Vec<String> = module_paths(&child, &module)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        ["parent", "parent::sibling::Item", "parent::child::inner::g"]
    );
    let skipped = code_of(
        "fn a() {}\n#[cfg(test)]\nmod tests;\nfn b() { crate::x::y(); }\n#[cfg(test)]\nmod more {\n    use crate::w;\n    fn t() {\n    }\n}\nfn c() {}\n",
    );
    assert!(
        skipped.contains("fn b()") && skipped.contains("fn c()") && !skipped.contains("crate::w"),
        "{skipped}"
    );

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

    // A child that globs its parent while the parent imports the child: a circle.
    let tree = std::env::temp_dir().join(format!("duet-tidy-{}", std::process::id()));
    std::fs::create_dir_all(tree.join("a")).expect("a folder");
    std::fs::write(tree.join("lib.rs"), "mod a;\n").expect("write");
    std::fs::write(tree.join("a/mod.rs"), "mod b;\nuse self::b::*;\n").expect("write");
    std::fs::write(tree.join("a/b.rs"), "use super::*;\n").expect("write");
    let found = circles(&import_graph(&tree));
    std::fs::remove_dir_all(&tree).ok();
    assert_eq!(found, [["a", "a::b"]]);

    let server = import_graph(&root().join("server/src"));
    assert!(
        server["routes::predict"].contains("service::predict"),
        "the server's imports are read: {:?}",
        server["routes::predict"]
    );
}
