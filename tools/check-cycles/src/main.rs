//! Fails when the source files of a crate import each other in a loop.
//!
//! A file is a module (`foo.rs`, or `foo/mod.rs` for a folder); file A imports file B when
//! any path in A (a `use`, however grouped — `use super::{b, X}` — an expression, a type, a
//! pattern, or the tokens of a macro call) names an item of B: `crate::b::X`, `super::X`,
//! `self::b::X`, or `b::X` for a module `b` declared in A. A `mod b;` declaration alone is not
//! an import: a parent holds its children, and a child may use its parent's items, but a
//! parent that also takes names from its child closes a loop, and so does any longer chain. A
//! `pub use b::X` re-export is a facade, not an import: a path through it (`crate::X`) is
//! followed to the module that defines `X`. Items under `#[cfg(test)]` are left out: tests may
//! reach anywhere. Doc comments are not code and their links are not imports.
//!
//! The files are parsed with `syn`, so the check sees what the compiler sees, not what a
//! pattern over the text happens to match.
//!
//! Usage: `check-cycles [CRATE_SRC_DIR ...]` (default: every crate's `src/` of the
//! workspace). Exit status 1, and the loops on stderr, when there is one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The crates checked when none is named, relative to the workspace root.
const DEFAULT: &[&str] = &[
    "broker/src",
    "metadata/src",
    "cache/src",
    "objstore/src",
    "cli/src",
    "tools/check-cycles/src",
];

/// A module's path from the crate root (`[]` is the crate itself).
type Module = Vec<String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dirs: Vec<PathBuf> = match args.is_empty() {
        true => DEFAULT.iter().map(|d| root.join(d)).collect(),
        false => args.iter().map(PathBuf::from).collect(),
    };
    let mut bad = false;
    for dir in &dirs {
        let shown = dir.strip_prefix(&root).unwrap_or(dir).display().to_string();
        match check(dir) {
            Err(why) => {
                eprintln!("{shown}: {why}");
                bad = true;
            }
            Ok(report) => {
                for cycle in &report.cycles {
                    bad = true;
                    eprintln!("import cycle in {shown}:");
                    for (m, into) in cycle {
                        eprintln!("  {} -> {}", name(m), into.join(", "));
                    }
                }
                println!(
                    "{shown}: {} modules, {} imports, {} cycles",
                    report.modules,
                    report.imports,
                    report.cycles.len()
                );
            }
        }
    }
    match bad {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}

/// What [`check`] found in one crate.
pub struct Report {
    pub modules: usize,
    pub imports: usize,
    /// Each loop: its modules, each with the modules of the loop it imports.
    pub cycles: Vec<Vec<(Module, Vec<String>)>>,
}

/// The import graph of the crate in `src` and its loops.
pub fn check(src: &Path) -> Result<Report, String> {
    let files = files(src)?;
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let mut parsed = BTreeMap::new();
    for (m, f) in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        parsed.insert(m.clone(), file);
    }
    let mut reexports = BTreeMap::new();
    for (m, file) in &parsed {
        collect_reexports(m, &file.items, &mut reexports);
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, file) in &parsed {
        let mut paths = Paths {
            module: m.clone(),
            found: Vec::new(),
        };
        paths.items(&file.items);
        let targets = edges.entry(m.clone()).or_default();
        for (from, path) in paths.found {
            let Some(absolute) = absolute(&from, &path, &modules) else {
                continue;
            };
            let target = resolve(&modules, &absolute, &reexports, 0);
            if let Some(target) = target {
                if &target != m {
                    targets.insert(target);
                }
            }
        }
    }
    let imports = edges.values().map(BTreeSet::len).sum();
    let cycles = strongly_connected(&edges)
        .into_iter()
        .map(|comp| {
            (comp.iter())
                .map(|m| {
                    let into = (edges[m].iter())
                        .filter(|t| comp.contains(t))
                        .map(name)
                        .collect();
                    (m.clone(), into)
                })
                .collect()
        })
        .collect();
    Ok(Report {
        modules: modules.len(),
        imports,
        cycles,
    })
}

fn name(m: &Module) -> String {
    match m.is_empty() {
        true => "crate".to_string(),
        false => m.join("::"),
    }
}

/// Every `.rs` file under `src` by the module it is.
fn files(src: &Path) -> Result<BTreeMap<Module, PathBuf>, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src)
                    .expect("under src")
                    .with_extension("");
                let mut module: Module = (rel.iter())
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    module.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    module.pop();
                }
                out.insert(module, path);
            }
        }
    }
    Ok(out)
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && (a.parse_args::<syn::Meta>()).is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Every path of a use tree, with its leaf's name as used here (`as` renames it; `None`
/// for a glob): `use a::{b, c::D as E}` gives `a::b` (b) and `a::c::D` (E).
fn flatten(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            let leaf = n.ident.to_string();
            // `use a::{self}` names `a` itself.
            if leaf != "self" {
                path.push(leaf.clone());
            }
            let shown = path.last().cloned();
            out.push((path, shown));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((path, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// Per module: a name it re-exports (`pub use`) and the path it stands for, relative to
/// the module.
type Reexports = BTreeMap<Module, BTreeMap<String, Vec<String>>>;

fn collect_reexports(m: &Module, items: &[syn::Item], out: &mut Reexports) {
    for item in items {
        match item {
            syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                let mut flat = Vec::new();
                flatten(&u.tree, &mut Vec::new(), &mut flat);
                for (path, shown) in flat {
                    if let Some(shown) = shown {
                        out.entry(m.clone()).or_default().insert(shown, path);
                    }
                }
            }
            syn::Item::Mod(inner) if inner.content.is_some() && !is_test_only(&inner.attrs) => {
                let mut nested = m.clone();
                nested.push(inner.ident.to_string());
                collect_reexports(&nested, &inner.content.as_ref().expect("checked").1, out);
            }
            _ => {}
        }
    }
}

/// The paths a file names, each with the (possibly inline) module it is named from.
struct Paths {
    /// The module being walked: the file's, plus the inline `mod x { }` it is inside.
    module: Module,
    found: Vec<(Module, Vec<String>)>,
}

impl Paths {
    fn items(&mut self, items: &[syn::Item]) {
        for item in items {
            self.visit_item(item);
        }
    }

    fn push(&mut self, path: Vec<String>) {
        self.found.push((self.module.clone(), path));
    }

    /// Paths in a macro's tokens: `crate`, `super`, `self` or a lower-case name followed
    /// by `::` and names.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let mut path = vec![first.to_string()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!((trees.get(j), trees.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':');
                        match (colons, trees.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                path.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if path.len() > 1 {
                        self.push(path);
                    }
                    i = j;
                }
                _ => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Type(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => &[],
        };
        if is_test_only(attrs) {
            return;
        }
        match item {
            // A re-export is a facade (followed by `resolve`), not an import.
            syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {}
            syn::Item::Use(u) => {
                let mut flat = Vec::new();
                flatten(&u.tree, &mut Vec::new(), &mut flat);
                for (path, _) in flat {
                    self.push(path);
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    self.module.push(m.ident.to_string());
                    self.items(items);
                    self.module.pop();
                }
            }
            other => syn::visit::visit_item(self, other),
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let names = (path.segments.iter())
                .map(|s| s.ident.to_string())
                .collect();
            self.push(names);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Attributes (doc comments among them) name no items of the crate.
    }
}

/// `path` named from module `from`, from the crate root: `crate::`, `super::`, `self::`,
/// or a module declared under `from` (or under one of its inline parents, as a child's name
/// is in scope there). `None`: another crate's, or a local name.
fn absolute(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let (first, rest) = path.split_first()?;
    match first.as_str() {
        "crate" => Some(rest.to_vec()),
        "self" => Some([from.as_slice(), rest].concat()),
        "super" => {
            let mut base = from.clone();
            base.pop();
            let mut rest = rest;
            while rest.first().is_some_and(|r| r == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some([base.as_slice(), rest].concat())
        }
        _ => {
            let child = [from.as_slice(), std::slice::from_ref(first)].concat();
            // A child module by file, or an inline one, which shares its file's module.
            let declared = modules.iter().any(|m| m.starts_with(&child));
            declared.then(|| [from.as_slice(), path].concat())
        }
    }
}

/// The module file that defines what `path` names: its longest prefix that is a module,
/// followed through that module's re-exports.
fn resolve(
    modules: &BTreeSet<Module>,
    path: &[String],
    reexports: &Reexports,
    depth: usize,
) -> Option<Module> {
    for n in (0..=path.len()).rev() {
        let (m, rest) = path.split_at(n);
        if !modules.contains(m) {
            continue;
        }
        if let Some(target) = rest
            .first()
            .and_then(|r| reexports.get(m).and_then(|t| t.get(r)))
            .filter(|_| depth < 8)
        {
            // Another crate's item, re-exported here: no module of this crate defines it.
            let through = absolute(&m.to_vec(), target, modules)?;
            return resolve(
                modules,
                &[through.as_slice(), &rest[1..]].concat(),
                reexports,
                depth + 1,
            );
        }
        return Some(m.to_vec());
    }
    None
}

/// The loops of the graph: strongly connected components of more than one module (Tarjan).
fn strongly_connected(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        let empty = BTreeSet::new();
        for w in s.edges.get(v).unwrap_or(&empty) {
            let Some((w, _)) = s.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Report {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        check(&dir).unwrap()
    }

    fn loops(r: &Report) -> Vec<Vec<String>> {
        (r.cycles.iter())
            .map(|c| c.iter().map(|(m, _)| name(m)).collect())
            .collect()
    }

    #[test]
    fn a_loop_hidden_in_a_grouped_use_of_super_is_found() {
        let r = fixture("grouped_super");
        assert_eq!(loops(&r), [["a", "b"]]);
    }

    #[test]
    fn a_loop_through_an_expression_path_and_a_macro_is_found() {
        let r = fixture("expression_and_macro");
        assert_eq!(loops(&r), [["crate", "inner"]]);
    }

    #[test]
    fn parents_children_reexports_and_tests_make_no_loop() {
        let r = fixture("no_loop");
        assert!(r.cycles.is_empty(), "{:?}", loops(&r));
        assert!(r.imports > 0);
    }
}
