//! Tidy checks that keep the workspace's shape true: the allowed dependency edges between
//! crates (read from `cargo metadata`), no import circle between the files of one crate
//! (`imports.rs`), a `//!` header and a size limit on every source file, and a code map in
//! docs/ARCHITECTURE.md that names every workspace package.
//!
//! Each rule is a pure function over parsed data, so the `rules_*` tests can feed it a
//! fabricated violation and prove it is caught; the other tests apply it to the real tree.

mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use serde_json::Value;

/// Files above this many lines are reported (the house style's soft limit).
const MAX_FILE_LINES: usize = 800;
/// Top-level folders whose `.rs` files must carry a `//!` header and stay under the limit.
const SOURCE_DIRS: [&str; 5] = ["domain", "application", "adapters", "bootstrap", "tests"];
/// Runtimes, IO, randomness and transports: none of them belongs in the pure core.
const FORBIDDEN_IN_DOMAIN: [&str; 9] =
    ["compio", "tokio", "async-lock", "argon2", "rand", "libc", "quinn", "axum", "crossfire"];
/// The use cases name no runtime and no transport stack.
const FORBIDDEN_IN_APPLICATION: [&str; 5] = ["compio", "tokio", "quinn", "axum", "crossfire"];
/// The simulated adapters run without a real event loop.
const FORBIDDEN_IN_SIM: [&str; 1] = ["compio"];

const DOMAIN: &str = "rill-domain";
const APPLICATION: &str = "rill-application";
const SIM_ADAPTER: &str = "rill-adapter-sim";
const BOOTSTRAP: &str = "rill-bootstrap";
const TESTS: &str = "rill-tests";
const SIMULATION: &str = "rill-simulation";
const ADAPTER_PREFIX: &str = "rill-adapter-";

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().expect("the tests crate sits inside the workspace").to_path_buf()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum DepKind {
    Normal,
    Dev,
    Build,
}

#[derive(Debug, Clone)]
struct Dependency {
    name: String,
    kind: DepKind,
}

#[derive(Debug, Clone)]
struct Package {
    name: String,
    /// The crate's directory relative to the workspace root, with `/` separators.
    dir: String,
    dependencies: Vec<Dependency>,
}

fn parse_metadata(json: &Value, root: &Path) -> anyhow::Result<Vec<Package>> {
    let packages = json["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let mut out = Vec::with_capacity(packages.len());
    for package in packages {
        let name = package["name"].as_str().context("package without a name")?.to_owned();
        let manifest = Path::new(package["manifest_path"].as_str().context("package without a manifest_path")?);
        let dir = manifest.parent().context("manifest_path has no parent")?;
        let dir = dir.strip_prefix(root).unwrap_or(dir).to_string_lossy().replace('\\', "/");
        let mut dependencies = Vec::new();
        for dependency in package["dependencies"].as_array().context("package without dependencies")? {
            let kind = match dependency["kind"].as_str() {
                None | Some("normal") => DepKind::Normal,
                Some("dev") => DepKind::Dev,
                Some("build") => DepKind::Build,
                Some(other) => bail!("unknown dependency kind `{other}` in {name}"),
            };
            let dep_name = dependency["name"].as_str().context("dependency without a name")?.to_owned();
            dependencies.push(Dependency { name: dep_name, kind });
        }
        out.push(Package { name, dir, dependencies });
    }
    Ok(out)
}

/// The workspace packages, from one `cargo metadata --no-deps` run per test process.
fn workspace_packages() -> &'static [Package] {
    static PACKAGES: OnceLock<Vec<Package>> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(&root)
            .output()
            .expect("run cargo metadata");
        assert!(
            output.status.success(),
            "cargo metadata failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let json: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
        parse_metadata(&json, &root).expect("cargo metadata has the documented shape")
    })
}

/// Where a package sits in the architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Domain,
    Application,
    ProductionAdapter,
    SimAdapter,
    Bootstrap,
    Tests,
    /// Simulation runs: the domain on the simulated adapters.
    Simulation,
}

fn layer_of(name: &str) -> Option<Layer> {
    match name {
        DOMAIN => Some(Layer::Domain),
        APPLICATION => Some(Layer::Application),
        SIM_ADAPTER => Some(Layer::SimAdapter),
        BOOTSTRAP => Some(Layer::Bootstrap),
        TESTS => Some(Layer::Tests),
        SIMULATION => Some(Layer::Simulation),
        _ if name.starts_with(ADAPTER_PREFIX) => Some(Layer::ProductionAdapter),
        _ => None,
    }
}

/// A dependency edge the architecture does not allow, or a package it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Violation {
    from: String,
    to: String,
    kind: DepKind,
    reason: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DepKind::Normal => "dependency",
            DepKind::Dev => "dev-dependency",
            DepKind::Build => "build-dependency",
        };
        write!(f, "forbidden edge {} -> {} ({kind}): {}", self.from, self.to, self.reason)
    }
}

/// Why `from -> dependency` is forbidden, if it is. `workspace` holds every package name.
fn edge_violation(from: Layer, dependency: &Dependency, workspace: &BTreeSet<&str>) -> Option<&'static str> {
    let to = dependency.name.as_str();
    let to_layer = if workspace.contains(to) { layer_of(to) } else { None };
    let dev = dependency.kind == DepKind::Dev;
    if to_layer == Some(Layer::ProductionAdapter) && from != Layer::Bootstrap {
        return Some("only rill-bootstrap picks production adapters");
    }
    match from {
        Layer::Domain if workspace.contains(to) => Some("rill-domain depends on no workspace package"),
        Layer::Domain if FORBIDDEN_IN_DOMAIN.contains(&to) => {
            Some("the domain does no IO, reads no clock, draws no randomness and has no runtime")
        }
        Layer::Application if FORBIDDEN_IN_APPLICATION.contains(&to) => {
            Some("the application names no runtime and no transport stack")
        }
        Layer::Application => match to_layer {
            None | Some(Layer::Domain) => None,
            Some(Layer::SimAdapter) if dev => None,
            Some(_) => Some("rill-application depends only on rill-domain (and on rill-adapter-sim in tests)"),
        },
        Layer::SimAdapter if FORBIDDEN_IN_SIM.contains(&to) => Some("the simulated adapters use no real runtime"),
        Layer::SimAdapter | Layer::ProductionAdapter => match to_layer {
            None | Some(Layer::Domain | Layer::Application) => None,
            // A production adapter may run the shared conformance tests against the simulator.
            Some(Layer::SimAdapter) if dev && from == Layer::ProductionAdapter => None,
            Some(_) => Some("adapters depend on rill-application and rill-domain only"),
        },
        Layer::Bootstrap => match to_layer {
            Some(Layer::Tests | Layer::Simulation) => Some("the composition root does not depend on the tests"),
            Some(Layer::SimAdapter) if !dev => Some("simulated adapters never ship in the server"),
            _ => None,
        },
        Layer::Tests if to.starts_with("rill-") => {
            Some("the tests are black-box: they drive the rill-server binary, not its crates")
        }
        Layer::Simulation => match to_layer {
            None | Some(Layer::Domain | Layer::Application | Layer::SimAdapter) => None,
            Some(_) => Some("the simulation runs the domain on the simulated adapters only"),
        },
        _ => None,
    }
}

/// Every forbidden edge in `packages`, plus every package without a layer.
fn dependency_violations(packages: &[Package]) -> Vec<Violation> {
    let workspace: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let mut violations = Vec::new();
    for package in packages {
        let Some(from) = layer_of(&package.name) else {
            violations.push(Violation {
                from: package.name.clone(),
                to: "?".into(),
                kind: DepKind::Normal,
                reason: "unknown package: give it a layer in tests/tests/tidy/main.rs and a section in docs/ARCHITECTURE.md",
            });
            continue;
        };
        for dependency in &package.dependencies {
            if let Some(reason) = edge_violation(from, dependency, &workspace) {
                violations.push(Violation {
                    from: package.name.clone(),
                    to: dependency.name.clone(),
                    kind: dependency.kind,
                    reason,
                });
            }
        }
    }
    violations
}

/// What is wrong with one source file: a missing `//!` first line, too many lines.
fn source_file_problems(path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.lines().next().is_some_and(|line| line.starts_with("//!")) {
        problems.push(format!("{path}: does not start with a `//!` line saying what it is for"));
    }
    let lines = text.lines().count();
    if lines > MAX_FILE_LINES {
        problems.push(format!("{path}: {lines} lines, over the {MAX_FILE_LINES}-line limit"));
    }
    problems
}

/// `.rs` files under `dir`, skipping `target` and hidden directories.
fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                collect_rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Whether `word` occurs in `text` as a whole name (not inside a longer crate name).
fn mentions(text: &str, word: &str) -> bool {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
    })
}

/// Package names and crate directories the code map does not mention.
fn undocumented(doc: &str, packages: &[Package]) -> Vec<String> {
    let mut missing = Vec::new();
    for package in packages {
        if !mentions(doc, &package.name) {
            missing.push(format!("package `{}`", package.name));
        }
        if !package.dir.is_empty() && !doc.contains(&package.dir) {
            missing.push(format!("directory `{}/` of {}", package.dir, package.name));
        }
    }
    missing
}

fn report(what: &str, problems: &[String]) -> String {
    format!("{what} ({}):\n  {}", problems.len(), problems.join("\n  "))
}

#[test]
fn workspace_metadata_is_read() {
    let packages = workspace_packages();
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    for expected in [DOMAIN, APPLICATION, SIM_ADAPTER, BOOTSTRAP, TESTS] {
        assert!(names.contains(expected), "cargo metadata does not list {expected}: {names:?}");
    }
    let production: Vec<&str> =
        names.iter().copied().filter(|n| layer_of(n) == Some(Layer::ProductionAdapter)).collect();
    assert!(!production.is_empty(), "no production adapter among {names:?}");
    // Positive controls: edges that must exist, so an empty parse cannot pass the rules.
    let depends =
        |from: &str, to: &str| packages.iter().any(|p| p.name == from && p.dependencies.iter().any(|d| d.name == to));
    assert!(depends(APPLICATION, DOMAIN), "rill-application -> rill-domain edge not seen");
    assert!(production.iter().any(|adapter| depends(BOOTSTRAP, adapter)), "bootstrap wires none of {production:?}");
    assert!(depends(TESTS, "iggy"), "rill-tests must use the official iggy client");
}

#[test]
fn dependency_edges_follow_the_architecture() {
    let violations: Vec<String> = dependency_violations(workspace_packages()).iter().map(|v| v.to_string()).collect();
    assert!(violations.is_empty(), "{}", report("forbidden dependency edges", &violations));
}

#[test]
fn source_files_have_headers_and_stay_small() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        collect_rust_files(&root.join(dir), &mut files);
    }
    files.sort();
    for expected in ["domain/src/lib.rs", "application/src/lib.rs", "bootstrap/src/main.rs", "tests/tests/tidy/main.rs"]
    {
        assert!(files.contains(&root.join(expected)), "{expected} not found among {} files", files.len());
    }
    let mut problems = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let relative = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        problems.extend(source_file_problems(&relative, &text));
    }
    assert!(problems.is_empty(), "{}", report("source files breaking the house style", &problems));
}

#[test]
fn architecture_doc_names_every_package() {
    let path = workspace_root().join("docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let missing = undocumented(&doc, workspace_packages());
    assert!(missing.is_empty(), "{}", report("docs/ARCHITECTURE.md does not mention", &missing));
}

fn package(name: &str, dependencies: &[(&str, DepKind)]) -> Package {
    Package {
        name: name.into(),
        dir: String::new(),
        dependencies: dependencies.iter().map(|(n, kind)| Dependency { name: (*n).into(), kind: *kind }).collect(),
    }
}

#[test]
fn rules_catch_each_forbidden_edge() {
    use DepKind::{Build, Dev, Normal};
    let graph = [
        package(DOMAIN, &[("xxhash-rust", Normal), ("proptest", Dev), (APPLICATION, Normal), ("tokio", Dev)]),
        package(
            APPLICATION,
            &[
                (DOMAIN, Normal),
                ("argon2", Normal),
                (SIM_ADAPTER, Dev),
                (SIM_ADAPTER, Normal),
                ("compio", Normal),
                ("rill-adapter-clock", Dev),
            ],
        ),
        package(
            "rill-adapter-clock",
            &[(APPLICATION, Normal), (SIM_ADAPTER, Dev), ("rill-adapter-storage-uring", Normal), (BOOTSTRAP, Build)],
        ),
        package("rill-adapter-storage-uring", &[(APPLICATION, Normal), ("compio", Normal)]),
        package(SIM_ADAPTER, &[(APPLICATION, Normal), ("rill-adapter-clock", Dev), ("compio", Normal)]),
        package(BOOTSTRAP, &[("rill-adapter-clock", Normal), (DOMAIN, Normal), (SIM_ADAPTER, Normal), (TESTS, Dev)]),
        package(TESTS, &[("iggy", Normal), ("tokio", Normal), (BOOTSTRAP, Normal), ("rill-domain", Dev)]),
        package(SIMULATION, &[(DOMAIN, Normal), (SIM_ADAPTER, Normal), (BOOTSTRAP, Dev)]),
        package("rill-extra", &[]),
    ];
    let found: BTreeSet<(String, String, DepKind)> =
        dependency_violations(&graph).into_iter().map(|v| (v.from, v.to, v.kind)).collect();
    let expected: BTreeSet<(String, String, DepKind)> = [
        (DOMAIN, APPLICATION, Normal),
        (DOMAIN, "tokio", Dev),
        (APPLICATION, SIM_ADAPTER, Normal),
        (APPLICATION, "compio", Normal),
        (APPLICATION, "rill-adapter-clock", Dev),
        ("rill-adapter-clock", "rill-adapter-storage-uring", Normal),
        ("rill-adapter-clock", BOOTSTRAP, Build),
        (SIM_ADAPTER, "rill-adapter-clock", Dev),
        (SIM_ADAPTER, "compio", Normal),
        (BOOTSTRAP, SIM_ADAPTER, Normal),
        (BOOTSTRAP, TESTS, Dev),
        (TESTS, BOOTSTRAP, Normal),
        (TESTS, DOMAIN, Dev),
        (SIMULATION, BOOTSTRAP, Dev),
        ("rill-extra", "?", Normal),
    ]
    .into_iter()
    .map(|(from, to, kind)| (from.to_owned(), to.to_owned(), kind))
    .collect();
    assert_eq!(found, expected);
    let violations = dependency_violations(&graph);
    let edge = violations.iter().find(|v| v.from == DOMAIN && v.to == APPLICATION).expect("domain edge flagged");
    let message = edge.to_string();
    assert!(message.contains("rill-domain -> rill-application"), "message must name the edge: {message}");
}

#[test]
fn rules_catch_bad_source_files() {
    assert!(source_file_problems("a.rs", "//! Fine.\nfn main() {}\n").is_empty());
    let headerless = source_file_problems("b.rs", "fn main() {}\n");
    assert!(headerless.len() == 1 && headerless[0].starts_with("b.rs"), "{headerless:?}");
    assert_eq!(source_file_problems("c.rs", "").len(), 1, "an empty file has no header");
    assert_eq!(source_file_problems("d.rs", "// plain comment\n//! late header\n").len(), 1);
    let at_limit = format!("//! Header.\n{}", "x\n".repeat(MAX_FILE_LINES - 1));
    assert!(source_file_problems("e.rs", &at_limit).is_empty());
    let over = format!("{at_limit}x\n");
    let problems = source_file_problems("f.rs", &over);
    assert!(problems.len() == 1 && problems[0].contains("f.rs: 801 lines"), "{problems:?}");
}

#[test]
fn rules_catch_undocumented_packages() {
    let mut documented = package("rill-adapter-sim", &[]);
    documented.dir = "adapters/sim".into();
    let mut missing = package("rill-adapter", &[]);
    missing.dir = "adapters/other".into();
    let doc = "`rill-adapter-sim` lives in adapters/sim.";
    assert!(undocumented(doc, std::slice::from_ref(&documented)).is_empty());
    // `rill-adapter` appears only inside `rill-adapter-sim`, which does not count.
    assert_eq!(undocumented(doc, &[missing]).len(), 2);
}

/// Whether an adapter's source reaches into the state the shards share (`Shared`, or
/// `Shard::shared`), which only the composition root and the tests may take.
fn reaches_into_shared(text: &str) -> bool {
    mentions(text, "Shared") || text.contains(".shared()")
}

#[test]
fn production_adapters_never_reach_into_the_shared_state() {
    let root = workspace_root();
    let mut files = Vec::new();
    for package in workspace_packages().iter().filter(|p| layer_of(&p.name) == Some(Layer::ProductionAdapter)) {
        collect_rust_files(&root.join(&package.dir), &mut files);
    }
    assert!(files.len() >= 10, "only {} adapter files read", files.len());
    let reaching: Vec<String> = files
        .iter()
        .filter(|path| reaches_into_shared(&std::fs::read_to_string(path).unwrap_or_default()))
        .map(|path| path.strip_prefix(&root).unwrap_or(path).display().to_string())
        .collect();
    assert!(reaching.is_empty(), "{}", report("adapters reaching into the shards' shared state", &reaching));
}

#[test]
fn rules_catch_an_adapter_reaching_into_the_shared_state() {
    assert!(reaches_into_shared("use rill_application::Shared;"));
    assert!(reaches_into_shared("let pool = shard.shared().pool;"));
    assert!(!reaches_into_shared("let ctx = GatewayContext::new(state); // a SharedThing"));
}

/// The `.rs` files under a crate's source directory, by path relative to it.
fn crate_sources(src: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    collect_rust_files(src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative =
                path.strip_prefix(src).expect("under the source directory").to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (relative, text)
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let root = workspace_root();
    let mut crates = 0;
    let mut problems = Vec::new();
    for package in workspace_packages() {
        let src = root.join(&package.dir).join("src");
        for crate_root in ["lib.rs", "main.rs"] {
            if !src.join(crate_root).exists() {
                continue;
            }
            crates += 1;
            let circles = imports::import_circles(&crate_sources(&src), crate_root)
                .unwrap_or_else(|error| panic!("{}: {error}", src.display()));
            for circle in circles {
                let edges: Vec<String> =
                    circle.edges.iter().map(|(from, to, via)| format!("{from} -> {to} (`{via}`)")).collect();
                problems.push(format!(
                    "{}/src: {}\n    {}",
                    package.dir,
                    circle.files.join(", "),
                    edges.join("\n    ")
                ));
            }
        }
    }
    assert!(crates >= 10, "only {crates} crates read");
    assert!(problems.is_empty(), "{}", report("import circles between the files of a crate", &problems));
}

fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files.iter().map(|(path, text)| ((*path).to_owned(), (*text).to_owned())).collect()
}

fn circle_files(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    imports::import_circles(&sources(files), "lib.rs").unwrap().into_iter().map(|c| c.files).collect()
}

#[test]
fn rules_catch_an_import_circle() {
    // Two files naming each other's items.
    let direct = [
        ("lib.rs", "//! C.\nmod a;\nmod b;\n"),
        ("a.rs", "//! A.\nuse crate::b::B;\npub struct A(B);\n"),
        ("b.rs", "//! B.\npub struct B;\nfn f() -> usize { std::mem::size_of::<crate::a::A>() }\n"),
    ];
    assert_eq!(circle_files(&direct), vec![vec!["a.rs".to_owned(), "b.rs".to_owned()]]);
    // A parent that re-exports a child which uses an item the parent defines.
    let through_parent = [
        ("lib.rs", "//! C.\npub mod p;\n"),
        ("p/mod.rs", "//! P.\nmod x;\npub use x::X;\npub struct Core;\n"),
        ("p/x.rs", "//! X.\nuse super::Core;\npub struct X(Core);\n"),
    ];
    assert_eq!(circle_files(&through_parent), vec![vec!["p/mod.rs".to_owned(), "p/x.rs".to_owned()]]);
    // Three files in a ring, one edge an inline path through a `use`d module.
    let ring = [
        ("lib.rs", "//! C.\nmod a;\nmod b;\nmod c;\n"),
        ("a.rs", "//! A.\nuse crate::b;\npub fn a() { b::b() }\n"),
        ("b.rs", "//! B.\npub fn b() { super::c::c() }\n"),
        ("c.rs", "//! C.\npub fn c() { use crate::a::a; a() }\n"),
    ];
    assert_eq!(circle_files(&ring), vec![vec!["a.rs".to_owned(), "b.rs".to_owned(), "c.rs".to_owned()]]);
}

#[test]
fn rules_let_a_facade_module_and_test_modules_be() {
    // A facade re-exporting its children, which reach each other through it: no circle.
    let facade = [
        ("lib.rs", "//! C.\npub mod p;\npub use p::Y;\n"),
        ("p/mod.rs", "//! P.\nmod x;\nmod y;\npub use x::X;\npub use y::Y;\n"),
        ("p/x.rs", "//! X.\nuse super::Y;\npub struct X(Y);\n"),
        ("p/y.rs", "//! Y.\npub struct Y;\n#[cfg(test)]\nmod tests { use crate::p::X; }\n"),
    ];
    assert!(circle_files(&facade).is_empty(), "{:?}", circle_files(&facade));
    // Names from other crates and `std` are no edges.
    let external = [("lib.rs", "//! C.\nmod a;\nuse std::fmt;\n"), ("a.rs", "//! A.\nuse serde::Serialize;\n")];
    assert!(circle_files(&external).is_empty());
}
