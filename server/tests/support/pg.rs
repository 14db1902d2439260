//! PostgreSQL for duet's tests, never a mock: a fresh database in the server the test command
//! names (`DUET_TEST_PG`, an administrator's URL; default `postgres://postgres@127.0.0.1:5432/
//! postgres`), or a throwaway cluster (`initdb` + `pg_ctl` on a temporary folder and a free
//! port) that a test can stop and start. Where neither exists a test is skipped with a message,
//! except under `CI=true`, where that is a failure.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

/// `CI=true`: a missing PostgreSQL fails the test instead of skipping it.
fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn unavailable(why: &str) {
    assert!(
        !required(),
        "CI=true and no PostgreSQL for the tests: {why}"
    );
    eprintln!("skipped: no PostgreSQL for this test ({why}); scripts/test.sh provides one");
}

/// Runs `f` on a runtime of its own, on a thread of its own (callers may be inside a runtime).
fn blocking<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(f)
    })
    .join()
    .expect("the database thread")
}

/// Runs `sql` (one or more statements) on `dsn`.
pub fn execute(dsn: &str, sql: &str) -> Result<(), String> {
    let (dsn, sql) = (dsn.to_string(), sql.to_string());
    blocking(async move {
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("{dsn}: {e}"))?;
        let driver = tokio::spawn(connection);
        let result = client.batch_execute(&sql).await.map_err(|e| e.to_string());
        drop(client);
        let _ = driver.await;
        result
    })
}

/// Runs `sql` on `dsn` and returns the first column of every row, as text.
pub fn column(dsn: &str, sql: &str) -> Vec<Option<String>> {
    let (dsn, sql) = (dsn.to_string(), sql.to_string());
    blocking(async move {
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let driver = tokio::spawn(connection);
        let rows = client.simple_query(&sql).await.expect("query");
        drop(client);
        let _ = driver.await;
        rows.into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
                _ => None,
            })
            .collect()
    })
}

/// `dsn` with another database name.
fn with_database(dsn: &str, name: &str) -> String {
    match dsn.rfind('/') {
        Some(i) if i > "postgres://".len() => {
            let (base, rest) = dsn.split_at(i);
            let query = rest.find('?').map_or("", |q| &rest[q..]);
            format!("{base}/{name}{query}")
        }
        _ => format!("{dsn}/{name}"),
    }
}

fn reachable(dsn: &str) -> bool {
    let Ok(config) = tokio_postgres::Config::from_str(dsn) else {
        return false;
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return false,
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
}

/// A database created for one test, dropped when the test ends.
#[derive(Debug)]
pub struct TestDatabase {
    pub dsn: String,
    admin: String,
    name: String,
}

impl TestDatabase {
    /// A fresh database in the server `DUET_TEST_PG` names; `None` (the test skips) when there
    /// is none and CI is not set.
    pub fn create(tag: &str) -> Option<TestDatabase> {
        let admin = std::env::var("DUET_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        if !reachable(&admin) {
            unavailable(&format!("{admin} does not answer"));
            return None;
        }
        TestDatabase::create_in(&admin, tag)
    }

    pub fn create_in(admin: &str, tag: &str) -> Option<TestDatabase> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!("duet_test_{tag}_{}_{stamp}", std::process::id());
        if let Err(e) = execute(admin, &format!("CREATE DATABASE {name}")) {
            unavailable(&format!("cannot create a database: {e}"));
            return None;
        }
        Some(TestDatabase {
            dsn: with_database(admin, &name),
            admin: admin.to_string(),
            name,
        })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = execute(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// A PostgreSQL cluster of its own on a temporary folder and a free port, which a test may
/// stop and start; removed on drop.
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// The system user that runs it when the tests run as root (PostgreSQL refuses root).
    owner: Option<String>,
}

fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut candidates = on_path;
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = dirs.flatten().map(|d| d.path().join("bin")).collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
}

/// A free port below the kernel's ephemeral range (32768 and up), so that while the cluster is
/// stopped no process that asks the kernel for a port can take it.
fn quiet_port() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default()
        ^ std::process::id();
    (0..2000u32)
        .map(|i| 20_000 + u16::try_from((seed.wrapping_add(i * 7919)) % 10_000).unwrap_or(0))
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port in 20000-29999")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Cluster {
    /// Initialises and starts a cluster; `None` (the test skips) when PostgreSQL's programs are
    /// not installed and CI is not set.
    pub fn start() -> Option<Cluster> {
        let Some(bin) = find_bin() else {
            unavailable("initdb and pg_ctl are not installed");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        let owner = is_root().then(|| "postgres".to_string());
        if let Some(user) = &owner {
            let ok = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown {user} {}", dir.path().display());
        }
        let port = quiet_port();
        let cluster = Cluster {
            dir,
            bin,
            port,
            owner,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        cluster.resume();
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut command = match &self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts (again) on the same port and data.
    pub fn resume(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
    }

    /// Stops it: clients are disconnected at once.
    pub fn stop(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// The administrator's URL.
    pub fn admin(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let exe = self.bin.join("pg_ctl");
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let _ = match &self.owner {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&exe)
                .args(args)
                .output(),
            None => Command::new(&exe).args(args).output(),
        };
    }
}
