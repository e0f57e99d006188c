//! The import graph between the files of one crate, read from their source with `syn`: a
//! file depends on another when it names an item defined there (in a `use`, a re-export or
//! an inline `crate::`, `super::`, `self::` or child-module path), re-exports and `use`
//! bindings followed to the file that defines the item. `mod x;` alone is no edge, and
//! `#[cfg(test)]` modules are left out. Circles are its strongly connected components.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;

/// One file of the crate: its module path, what it defines and binds, what it names.
#[derive(Debug, Default)]
struct FileModule {
    /// Items defined at the module's top level (types, functions, constants, macros).
    items: BTreeSet<String>,
    /// `use` bindings, public or not: name -> absolute path of what it names.
    bindings: BTreeMap<String, Vec<String>>,
    /// Glob imports, absolute module paths.
    globs: Vec<Vec<String>>,
    /// Child modules: name -> index in `CrateGraph::modules`.
    children: BTreeMap<String, usize>,
    /// The file the module's code is in (an inline module is its parent's file).
    file: String,
    /// Absolute module path.
    path: Vec<String>,
    /// Paths the module's code names, made absolute, with how they were written.
    references: Vec<(Vec<String>, String)>,
}

/// Every module of a crate, the root first.
struct CrateGraph {
    modules: Vec<FileModule>,
}

/// Paths of one module's code, as written: the first segment tells where they start.
#[derive(Default)]
struct PathCollector {
    paths: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            self.paths.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    // Nested modules are walked as modules of their own.
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    // A `use` inside a function body: what it names (a module's own `use` items are read
    // apart, with their bindings).
    fn visit_item_use(&mut self, item_use: &'ast syn::ItemUse) {
        let mut flat = Vec::new();
        flatten_use(&item_use.tree, &mut Vec::new(), &mut flat);
        self.paths.extend(flat.into_iter().map(|(_, path)| path));
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && attr.meta.require_list().is_ok_and(|list| list.tokens.to_string() == "test")
    })
}

/// `use` trees flattened: (bound name or `*` for a glob, path as written).
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            flatten_use(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) if name.ident == "self" => {
            out.push((prefix.last().cloned().unwrap_or_default(), prefix.clone()));
        }
        syn::UseTree::Name(name) => {
            let mut path = prefix.clone();
            path.push(name.ident.to_string());
            out.push((name.ident.to_string(), path));
        }
        syn::UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            if rename.ident != "self" {
                path.push(rename.ident.to_string());
            }
            out.push((rename.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(("*".into(), prefix.clone())),
        syn::UseTree::Group(group) => {
            for item in &group.items {
                flatten_use(item, prefix, out);
            }
        }
    }
}

/// The name an item defines, if it defines one.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The directory a module's `mod x;` children live in, for a module in `file`.
fn child_dir(file: &str, inline_path: &[String]) -> String {
    let (dir, name) = file.rsplit_once('/').map_or(("", file), |(dir, name)| (dir, name));
    let mut base = match name {
        "lib.rs" | "main.rs" | "mod.rs" => dir.to_owned(),
        _ => {
            [dir, name.trim_end_matches(".rs")].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join("/")
        }
    };
    for segment in inline_path {
        base = if base.is_empty() { segment.clone() } else { format!("{base}/{segment}") };
    }
    base
}

impl CrateGraph {
    /// Reads the crate whose root is `root` among `sources` (path -> text, paths relative
    /// to the crate's source directory), following its `mod` declarations.
    fn read(sources: &BTreeMap<String, String>, root: &str) -> Result<Self, String> {
        let mut graph = CrateGraph { modules: Vec::new() };
        let text = sources.get(root).ok_or_else(|| format!("no {root}"))?;
        let file = syn::parse_file(text).map_err(|e| format!("{root}: {e}"))?;
        graph.add_module(sources, root, Vec::new(), &[], &file.items)?;
        Ok(graph)
    }

    fn add_module(
        &mut self,
        sources: &BTreeMap<String, String>,
        file: &str,
        path: Vec<String>,
        inline_path: &[String],
        items: &[syn::Item],
    ) -> Result<usize, String> {
        let index = self.modules.len();
        self.modules.push(FileModule { file: file.to_owned(), path: path.clone(), ..FileModule::default() });
        // Children first: a `use` may name one declared further down.
        for item_mod in items.iter().filter_map(|item| match item {
            syn::Item::Mod(item_mod) if !is_cfg_test(&item_mod.attrs) => Some(item_mod),
            _ => None,
        }) {
            let name = item_mod.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            let child = match &item_mod.content {
                Some((_, inner)) => {
                    let mut inline = inline_path.to_vec();
                    inline.push(name.clone());
                    self.add_module(sources, file, child_path, &inline, inner)?
                }
                None => {
                    let dir = child_dir(file, inline_path);
                    let join = |tail: String| if dir.is_empty() { tail } else { format!("{dir}/{tail}") };
                    let candidates = [join(format!("{name}.rs")), join(format!("{name}/mod.rs"))];
                    let Some(child_file) = candidates.into_iter().find(|c| sources.contains_key(c)) else {
                        continue;
                    };
                    let parsed = syn::parse_file(&sources[&child_file]).map_err(|e| format!("{child_file}: {e}"))?;
                    self.add_module(sources, &child_file, child_path, &[], &parsed.items)?
                }
            };
            self.modules[index].children.insert(name.clone(), child);
            self.modules[index].items.insert(name);
        }
        let mut collector = PathCollector::default();
        for item in items {
            if let Some(name) = item_name(item) {
                self.modules[index].items.insert(name);
            }
            match item {
                syn::Item::Use(item_use) => {
                    let mut flat = Vec::new();
                    flatten_use(&item_use.tree, &mut Vec::new(), &mut flat);
                    for (name, written) in flat {
                        let Some(absolute) = self.absolute(index, &written) else { continue };
                        self.modules[index].references.push((absolute.clone(), written.join("::")));
                        match name.as_str() {
                            "*" => self.modules[index].globs.push(absolute),
                            _ => drop(self.modules[index].bindings.insert(name, absolute)),
                        }
                    }
                }
                syn::Item::Mod(_) => {}
                other => collector.visit_item(other),
            }
        }
        for written in collector.paths {
            if let Some(absolute) = self.absolute(index, &written) {
                self.modules[index].references.push((absolute, written.join("::")));
            }
        }
        Ok(index)
    }

    /// A path as written in module `index`, made absolute from the crate root; `None` for
    /// one that leaves the crate (another crate, `std`, a local name).
    fn absolute(&self, index: usize, written: &[String]) -> Option<Vec<String>> {
        let here = &self.modules[index].path;
        let first = written.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => here[..here.len().checked_sub(1)?].to_vec(),
            // A child module of this one.
            name if self.modules[index].children.contains_key(name) => {
                let mut path = here.clone();
                path.push(name.to_owned());
                return Some(path.into_iter().chain(written[1..].iter().cloned()).collect());
            }
            // A name a `use` of this module bound to something of the crate.
            name if self.modules[index].bindings.contains_key(name) => {
                let bound = self.modules[index].bindings[name].clone();
                return Some(bound.into_iter().chain(written[1..].iter().cloned()).collect());
            }
            _ => return None,
        };
        let mut rest = &written[1..];
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn module_at(&self, path: &[String]) -> Option<usize> {
        let mut index = 0;
        for segment in path {
            index = *self.modules[index].children.get(segment)?;
        }
        Some(index)
    }

    /// The file that defines what an absolute path names: its deepest module, then the item
    /// there, through `use` bindings and globs (at most `depth` more hops).
    fn defining_file(&self, path: &[String], depth: usize) -> Option<String> {
        let mut index = 0;
        for (at, segment) in path.iter().enumerate() {
            let module = &self.modules[index];
            if let Some(&child) = module.children.get(segment) {
                index = child;
                continue;
            }
            if module.items.contains(segment) || depth == 0 {
                return Some(module.file.clone());
            }
            if let Some(bound) = module.bindings.get(segment) {
                let mut target = bound.clone();
                target.extend(path[at + 1..].iter().cloned());
                return self.defining_file(&target, depth - 1).or_else(|| Some(module.file.clone()));
            }
            for glob in &module.globs {
                let Some(from) = self.module_at(glob) else { continue };
                let globbed = &self.modules[from];
                if globbed.items.contains(segment) || globbed.bindings.contains_key(segment) {
                    let mut target = glob.clone();
                    target.extend(path[at..].iter().cloned());
                    return self.defining_file(&target, depth - 1);
                }
            }
            return Some(module.file.clone());
        }
        Some(self.modules[index].file.clone())
    }

    /// Edges between different files: (from, to) -> how the first reference was written.
    fn edges(&self) -> BTreeMap<(String, String), String> {
        let mut edges = BTreeMap::new();
        for module in &self.modules {
            for (absolute, written) in &module.references {
                let Some(to) = self.defining_file(absolute, 8) else { continue };
                if to != module.file {
                    edges.entry((module.file.clone(), to)).or_insert_with(|| written.clone());
                }
            }
        }
        edges
    }
}

/// A set of files that import each other, with the edges among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub files: Vec<String>,
    /// (from, to, the path through which `from` names `to`).
    pub edges: Vec<(String, String, String)>,
}

/// The import circles of the crate rooted at `root` among `sources`.
pub fn import_circles(sources: &BTreeMap<String, String>, root: &str) -> Result<Vec<Circle>, String> {
    let edges = CrateGraph::read(sources, root)?.edges();
    let mut successors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        successors.entry(from.as_str()).or_default().push(to.as_str());
        successors.entry(to.as_str()).or_default();
    }
    let components = strongly_connected(&successors);
    Ok(components
        .into_iter()
        .filter(|files| files.len() > 1)
        .map(|files| {
            let inside: BTreeSet<&str> = files.iter().copied().collect();
            let edges = edges
                .iter()
                .filter(|((from, to), _)| inside.contains(from.as_str()) && inside.contains(to.as_str()))
                .map(|((from, to), written)| (from.clone(), to.clone(), written.clone()))
                .collect();
            Circle { files: files.into_iter().map(str::to_owned).collect(), edges }
        })
        .collect())
}

/// Tarjan's strongly connected components, each sorted, in a stable order.
fn strongly_connected<'a>(successors: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(node: &'a str, successors: &BTreeMap<&'a str, Vec<&'a str>>, state: &mut State<'a>) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        for &to in successors.get(node).map(Vec::as_slice).unwrap_or_default() {
            if !state.index.contains_key(to) {
                visit(to, successors, state);
                let low = state.low[node].min(state.low[to]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(to) {
                let low = state.low[node].min(state.index[to]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member);
                if member == node {
                    break;
                }
            }
            component.sort_unstable();
            state.components.push(component);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &node in successors.keys() {
        if !state.index.contains_key(node) {
            visit(node, successors, &mut state);
        }
    }
    state.components.sort();
    state.components
}
