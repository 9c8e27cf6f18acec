//! Tidy checks over the workspace's sources, run by `cargo test`:
//! - no hand-written `.rs` file is longer than [`FILE_LINES_MAX`] lines (generated bindings
//!   under a `generated/` folder are exempt);
//! - no crate has an import circle of more than two files: within each crate, the files'
//!   module dependencies (`use` items and paths written in code through `crate::`, `super::`,
//!   `self::` or a child module's name, a name re-exported by a module followed to the module
//!   that defines it; the crate root's own `pub use` items are its facade, not dependencies)
//!   have no simple cycle through three files or more. The crate root is left out: it is the
//!   crate's facade and hub (its error type, its entry points calling the phases), which
//!   every module may name and which may call any module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be: one idea a reader can hold.
const FILE_LINES_MAX: usize = 1_200;

/// Steps the cycle search may take per crate before it gives up (and fails, saying so).
const CYCLE_SEARCH_STEPS_MAX: usize = 5_000_000;

/// How many re-exports one name is followed through.
const REEXPORT_DEPTH_MAX: usize = 8;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn crates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .expect("the crates folder")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn no_hand_written_source_file_is_over_the_line_limit() {
    let mut long = Vec::new();
    let mut files = Vec::new();
    for dir in crates() {
        rust_files(&dir, &mut files);
    }
    rust_files(&workspace().join("fuzz"), &mut files);
    for f in &files {
        if f.components().any(|c| c.as_os_str() == "generated") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("a source file");
        let lines = text.lines().count();
        if lines > FILE_LINES_MAX {
            long.push(format!("{} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {FILE_LINES_MAX} lines: {long:#?}"
    );
}

/// A module path inside a crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// One crate's modules: each module's file text, the names it defines, its children.
struct Crate {
    modules: BTreeMap<ModPath, String>,
}

fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs").to_string();
    if !(parts.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// Text without comments, string literals or `#[cfg(test)]` modules written inline (their
/// `use super::*` is the file's own).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i + 1 < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i..].starts_with(b"#[cfg(test)]") {
            // Skip an inline test module: `#[cfg(test)] mod NAME { ... }`.
            let rest = &text[i..];
            let head_end = rest.find(['{', ';']).unwrap_or(rest.len());
            if rest[..head_end].contains("mod ") && rest.as_bytes().get(head_end) == Some(&b'{') {
                let mut depth = 0;
                let mut j = i + head_end;
                while j < b.len() {
                    match b[j] {
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                i = j + 1;
            } else {
                out.push('#');
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    // `x as y` keeps `x`; then white space goes.
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut kept = String::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "as" && i + 1 < words.len() {
            let alias = words[i + 1];
            // The alias may carry the punctuation that follows it (`y,` or `y}`).
            kept.extend(alias.chars().skip_while(|&c| is_ident(c)));
            i += 2;
        } else {
            kept.push_str(words[i]);
            i += 1;
        }
    }
    let tree = kept;
    fn go(prefix: &[String], s: &str, out: &mut Vec<Vec<String>>) {
        // Split top-level commas.
        let mut depth = 0;
        let mut start = 0;
        let mut items = Vec::new();
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&s[start..]);
        for item in items.into_iter().filter(|i| !i.is_empty()) {
            if let Some(open) = item.find('{') {
                let head = item[..open].trim_end_matches("::");
                let inner = &item[open + 1..item.len() - 1];
                let mut p = prefix.to_vec();
                p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
                go(&p, inner, out);
            } else {
                let mut p = prefix.to_vec();
                p.extend(item.split("::").filter(|s| !s.is_empty()).map(String::from));
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    go(&[], &tree, &mut out);
    out
}

/// The `use` items of a module's code: (public re-export, path).
fn uses(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let starts_item = before
            .chars()
            .last()
            .is_none_or(|c| !is_ident(c) && c != ':');
        let tail = &rest[at + 4..];
        let end = tail.find(';').unwrap_or(tail.len());
        if starts_item {
            let public = before.trim_end().ends_with("pub") || before.trim_end().ends_with(')');
            for p in expand_use(&tail[..end]) {
                out.push((public, p));
            }
        }
        rest = &tail[end.min(tail.len())..];
    }
    out
}

/// `code` without its `use` items.
fn without_uses(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let starts_item = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !is_ident(c) && c != ':');
        let end = if starts_item {
            at + rest[at..].find(';').unwrap_or(rest.len() - at)
        } else {
            at + 4
        };
        if starts_item {
            out.push_str(&rest[..at]);
        } else {
            out.push_str(&rest[..end]);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Every path written in code (outside `use` items) that starts with `crate`, `super`, `self`
/// or one of `children`.
fn code_paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = without_uses(code).chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars[i]) && (i == 0 || (!is_ident(chars[i - 1]) && chars[i - 1] != ':')) {
            let mut j = i;
            let mut segs = Vec::new();
            loop {
                let s = j;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                segs.push(chars[s..j].iter().collect::<String>());
                if j + 2 < chars.len()
                    && chars[j] == ':'
                    && chars[j + 1] == ':'
                    && is_ident(chars[j + 2])
                {
                    j += 2;
                } else {
                    break;
                }
            }
            let first = segs[0].as_str();
            if segs.len() > 1
                && (first == "crate"
                    || first == "super"
                    || first == "self"
                    || children.contains(first))
            {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn children_of(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let l = line.trim();
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ")
            && let Some(name) = name.strip_suffix(';')
        {
            out.insert(name.trim().to_string());
        }
    }
    out
}

fn defines(code: &str, name: &str) -> bool {
    [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "union ",
    ]
    .iter()
    .any(|kw| {
        code.match_indices(&format!("{kw}{name}")).any(|(at, _)| {
            code[at + kw.len() + name.len()..]
                .chars()
                .next()
                .is_none_or(|c| !is_ident(c))
        })
    }) || code.contains(&format!("macro_rules! {name}"))
}

impl Crate {
    fn load(dir: &Path) -> Crate {
        let src = dir.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut modules = BTreeMap::new();
        for f in files {
            if f.components()
                .any(|c| c.as_os_str() == "generated" || c.as_os_str() == "bin")
            {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("a source file");
            modules.insert(module_path(&src, &f), code_only(&text));
        }
        Crate { modules }
    }

    /// The module a path names from `at`, with the rest of the path after it.
    fn resolve(&self, at: &ModPath, path: &[String]) -> Option<(ModPath, Vec<String>)> {
        let mut base: ModPath = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super") => at[..at.len().saturating_sub(1)].to_vec(),
            Some("self") => at.clone(),
            Some(child) => {
                let mut p = at.clone();
                p.push(child.to_string());
                if !self.modules.contains_key(&p) {
                    return None;
                }
                return Some(self.longest(p, &path[1..]));
            }
            None => return None,
        };
        let mut rest = &path[1..];
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        Some(self.longest(base, rest))
    }

    fn longest(&self, mut base: ModPath, mut rest: &[String]) -> (ModPath, Vec<String>) {
        while let Some(next) = rest.first() {
            let mut p = base.clone();
            p.push(next.clone());
            if self.modules.contains_key(&p) {
                base = p;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        (base, rest.to_vec())
    }

    /// The module that defines `name`, starting at `module` and following its re-exports.
    fn definer(&self, module: &ModPath, name: &str, depth: usize) -> ModPath {
        let Some(code) = self.modules.get(module) else {
            return module.clone();
        };
        if depth >= REEXPORT_DEPTH_MAX || defines(code, name) {
            return module.clone();
        }
        for (public, path) in uses(code) {
            if !public {
                continue;
            }
            let last = path.last().map(String::as_str);
            if last == Some(name) {
                if let Some((m, rest)) = self.resolve(module, &path)
                    && m != *module
                {
                    return match rest.last() {
                        Some(n) => self.definer(&m, n, depth + 1),
                        None => m,
                    };
                }
            } else if last == Some("*")
                && let Some((m, _)) = self.resolve(module, &path[..path.len() - 1])
                && m != *module
                && self.modules.get(&m).is_some_and(|c| defines(c, name))
            {
                return m;
            }
        }
        module.clone()
    }

    /// Each module's dependencies on the crate's other modules.
    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut out = BTreeMap::new();
        for (module, code) in &self.modules {
            let children = children_of(code);
            let mut deps = BTreeSet::new();
            // The crate root's public re-exports are its facade, not dependencies: a user of
            // a re-exported name is sent to the module that defines it.
            let mut paths: Vec<Vec<String>> = uses(code)
                .into_iter()
                .filter(|(public, _)| !(module.is_empty() && *public))
                .map(|(_, p)| p)
                .collect();
            paths.extend(code_paths(code, &children));
            for path in paths {
                if let Some((m, rest)) = self.resolve(module, &path) {
                    let m = match rest.first() {
                        Some(name) if name != "*" => self.definer(&m, name, 0),
                        _ => m,
                    };
                    // A parent naming its own child module to declare or re-export it is
                    // structure, not a dependency, when nothing but the child's name is used.
                    if m != *module {
                        deps.insert(m);
                    }
                }
            }
            out.insert(module.clone(), deps);
        }
        out
    }
}

/// The first simple cycle through three modules or more, if any; `Err` when the search bound
/// is reached.
fn long_cycle(
    edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> Result<Option<Vec<ModPath>>, String> {
    let nodes: Vec<&ModPath> = edges.keys().collect();
    let index: BTreeMap<&ModPath, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|d| index.get(d).copied())
                .collect()
        })
        .collect();
    let mut steps = 0usize;
    // Cycles whose smallest node is `s`, through nodes above `s` only; none through the crate
    // root (the empty path).
    for s in (0..nodes.len()).filter(|&s| !nodes[s].is_empty()) {
        let mut path = vec![s];
        let mut on = vec![false; nodes.len()];
        on[s] = true;
        let mut stack = vec![0usize];
        while let Some(top) = stack.last_mut() {
            steps += 1;
            if steps > CYCLE_SEARCH_STEPS_MAX {
                return Err(format!(
                    "search bound of {CYCLE_SEARCH_STEPS_MAX} steps reached"
                ));
            }
            let v = *path.last().expect("a path");
            if *top >= adj[v].len() {
                stack.pop();
                on[v] = false;
                path.pop();
                continue;
            }
            let w = adj[v][*top];
            *top += 1;
            if w == s && path.len() >= 3 {
                return Ok(Some(path.iter().map(|&i| nodes[i].clone()).collect()));
            }
            if w > s && !on[w] && !nodes[w].is_empty() {
                on[w] = true;
                path.push(w);
                stack.push(0);
            }
        }
    }
    Ok(None)
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle_through_more_than_two_files() {
    let mut found = Vec::new();
    for dir in crates() {
        let c = Crate::load(&dir);
        match long_cycle(&c.edges()) {
            Ok(None) => {}
            Ok(Some(cycle)) => {
                let names: Vec<String> = cycle.iter().map(name).collect();
                found.push(format!("{}: {}", dir.display(), names.join(" -> ")));
            }
            Err(e) => found.push(format!("{}: {e}", dir.display())),
        }
    }
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn the_circle_check_finds_a_three_file_circle_and_passes_pairs() {
    let m = |s: &str| -> ModPath {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split("::").map(String::from).collect()
        }
    };
    let c = Crate {
        modules: BTreeMap::from([
            (
                m(""),
                "mod a;\nmod b;\nmod c;\npub use a::Alpha;\n".to_string(),
            ),
            (
                m("a"),
                "use crate::b::Beta;\npub struct Alpha;\n".to_string(),
            ),
            (
                m("b"),
                "use super::Alpha;\npub struct Beta(crate::c::Gamma);\n".to_string(),
            ),
            (m("c"), "pub struct Gamma;\n".to_string()),
        ]),
    };
    // a <-> b through the root's re-export of Alpha: a pair, allowed.
    assert_eq!(long_cycle(&c.edges()), Ok(None));
    let mut c = c;
    c.modules
        .insert(m("c"), "pub struct Gamma(crate::Alpha);\n".to_string());
    // a -> b -> c -> a.
    let cycle = long_cycle(&c.edges()).expect("bounded").expect("a circle");
    assert_eq!(cycle.len(), 3, "{cycle:?}");
}

/// The `ipu-*` crates a manifest's `[dependencies]` name, without the prefix.
fn manifest_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_deps = l == "[dependencies]";
        } else if in_deps && let Some(rest) = l.strip_prefix("ipu-") {
            let name: String = rest
                .chars()
                .take_while(|&c| is_ident(c) || c == '-')
                .collect();
            out.insert(name);
        }
    }
    out
}

/// ARCHITECTURE.md's codemap says what each crate depends on, and it is what the crate's
/// manifest says: every `ipu-*` dependency named, no other (names without the prefix; other
/// words in the cell, such as external crates or notes in parentheses, are not crates of ours).
#[test]
fn the_codemap_names_every_crate_and_its_dependencies_as_the_manifests_do() {
    let text =
        std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let ours: BTreeSet<String> = crates()
        .iter()
        .map(|d| {
            d.file_name()
                .expect("a name")
                .to_string_lossy()
                .trim_start_matches("ipu-")
                .to_string()
        })
        .collect();
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 4
            && let Some(name) = cells[1]
                .strip_prefix("`ipu-")
                .and_then(|c| c.strip_suffix('`'))
        {
            let deps_cell = cells[cells.len() - 2];
            // Drop notes in parentheses, then take the words that name crates of ours.
            let mut plain = String::new();
            let mut depth = 0;
            for c in deps_cell.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ if depth == 0 => plain.push(c),
                    _ => {}
                }
            }
            let named: BTreeSet<String> = plain
                .split(|c: char| c == ',' || c.is_whitespace())
                .map(|w| w.trim_matches('`').to_string())
                .filter(|w| ours.contains(w))
                .collect();
            rows.insert(name.to_string(), named);
        }
    }
    let mut wrong = Vec::new();
    for dir in crates() {
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .trim_start_matches("ipu-")
            .to_string();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a manifest");
        let deps = manifest_dependencies(&manifest);
        match rows.get(&name) {
            None => wrong.push(format!("ipu-{name} has no codemap row")),
            Some(named) if *named != deps => wrong.push(format!(
                "ipu-{name}: the codemap says {named:?}, Cargo.toml says {deps:?}"
            )),
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
