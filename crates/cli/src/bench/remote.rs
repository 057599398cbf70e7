//! The client-library side of `sextant bench`: N tasks on one
//! [`Client`] (one connection, many requests in flight), each working
//! through its items one request at a time.

use super::plan::{Kind, Layout, Op, Phase};
use super::Progress;
use anyhow::{bail, Context, Result};
use sextant_client::Client;
use sextant_types::{Credentials, Soid};
use std::time::Instant;

/// What every task shares during a run.
pub struct Run {
    pub client: Client,
    pub cred: Credentials,
    pub layout: Layout,
    pub tasks: usize,
    pub readdir_passes: usize,
    /// SOID of the run's root directory.
    pub root: Soid,
    /// SOID of each task's directory.
    pub dirs: Vec<Soid>,
    /// SOIDs of each task's items (filled by create, used by stat).
    pub items: Vec<Vec<Soid>>,
}

/// Latency samples (ns) and readdir entries of one phase.
pub struct Outcome {
    pub latencies_ns: Vec<u64>,
    pub entries: u64,
}

impl Run {
    /// Makes the run's root `name` under `parent` and its directories
    /// (untimed).
    pub async fn prepare(
        client: Client,
        cred: Credentials,
        parent: &str,
        name: &str,
        layout: Layout,
        tasks: usize,
        readdir_passes: usize,
    ) -> Result<Run> {
        let p = client
            .resolve(&cred, parent.as_bytes(), true)
            .await
            .with_context(|| format!("{parent}: cannot resolve the parent of the run"))?;
        let root = client
            .mkdir(&cred, p.soid, name.as_bytes(), 0o755)
            .await
            .with_context(|| format!("making {parent}/{name}"))?
            .soid;
        let mut made = Vec::new();
        for d in layout.dirs(tasks) {
            let a = client
                .mkdir(&cred, root, d.as_bytes(), 0o755)
                .await
                .with_context(|| format!("making {parent}/{name}/{d}"))?;
            made.push(a.soid);
        }
        let dirs = (0..tasks)
            .map(|t| if layout.shared { made[0] } else { made[t] })
            .collect();
        Ok(Run {
            client,
            cred,
            layout,
            tasks,
            readdir_passes,
            root,
            dirs,
            items: vec![Vec::new(); tasks],
        })
    }

    /// Removes the run's directories and root (they are empty once the
    /// remove phases ran).
    pub async fn cleanup(&self, parent: &str, name: &str) -> Result<()> {
        for d in self.layout.dirs(self.tasks) {
            self.client
                .rmdir(&self.cred, self.root, d.as_bytes())
                .await
                .with_context(|| format!("removing {parent}/{name}/{d}"))?;
        }
        let p = self
            .client
            .resolve(&self.cred, parent.as_bytes(), true)
            .await?;
        self.client
            .rmdir(&self.cred, p.soid, name.as_bytes())
            .await
            .with_context(|| format!("removing {parent}/{name}"))?;
        Ok(())
    }

    /// Runs one phase with every task at once.
    pub async fn phase(&mut self, phase: Phase, progress: &Progress) -> Result<Outcome> {
        let mut handles = Vec::with_capacity(self.tasks);
        for t in 0..self.tasks {
            let task = Task {
                client: self.client.clone(),
                cred: self.cred.clone(),
                layout: self.layout,
                task: t,
                dir: self.dirs[t],
                items: std::mem::take(&mut self.items[t]),
                passes: self.readdir_passes,
                progress: progress.clone(),
            };
            handles.push(tokio::spawn(task.run(phase)));
        }
        let mut out = Outcome {
            latencies_ns: Vec::new(),
            entries: 0,
        };
        for (t, h) in handles.into_iter().enumerate() {
            let (lat, entries, items) = h
                .await
                .context("a benchmark task panicked")?
                .with_context(|| format!("{phase}, task {t}"))?;
            out.latencies_ns.extend(lat);
            out.entries += entries;
            self.items[t] = items;
        }
        Ok(out)
    }
}

/// One task's share of a phase.
struct Task {
    client: Client,
    cred: Credentials,
    layout: Layout,
    task: usize,
    dir: Soid,
    items: Vec<Soid>,
    passes: usize,
    progress: Progress,
}

type TaskResult = Result<(Vec<u64>, u64, Vec<Soid>)>;

impl Task {
    async fn run(mut self, phase: Phase) -> TaskResult {
        let (c, cred, dir) = (&self.client, &self.cred, self.dir);
        let n = if phase.op == Op::Readdir {
            self.passes
        } else {
            self.layout.items
        };
        let mut lat = Vec::with_capacity(n);
        let mut entries = 0u64;
        if phase.op == Op::Create {
            self.items.clear();
        }
        for i in 0..n {
            let name = self.layout.item(phase.kind, self.task, i);
            let name = name.as_bytes();
            let t = Instant::now();
            match (phase.op, phase.kind) {
                (Op::Create, Kind::File) => {
                    let a = c.create(cred, dir, name, 0o644, true).await;
                    self.items.push(a.with_context(|| item(name))?.soid);
                }
                (Op::Create, Kind::Dir) => {
                    let a = c.mkdir(cred, dir, name, 0o755).await;
                    self.items.push(a.with_context(|| item(name))?.soid);
                }
                (Op::Stat, _) => {
                    let Some(&s) = self.items.get(i) else {
                        bail!("stat before create");
                    };
                    c.getattr(cred, s).await.with_context(|| item(name))?;
                }
                (Op::Lookup, _) => {
                    c.lookup(cred, dir, name)
                        .await
                        .with_context(|| item(name))?;
                }
                (Op::Readdir, _) => {
                    let mut after = 0;
                    loop {
                        let page = c.readdir(cred, dir, after, 1024).await.context("readdir")?;
                        let Some(last) = page.last() else { break };
                        after = last.cookie;
                        entries += page.len() as u64;
                    }
                }
                (Op::Remove, Kind::File) => {
                    c.unlink(cred, dir, name)
                        .await
                        .with_context(|| item(name))?;
                }
                (Op::Remove, Kind::Dir) => {
                    c.rmdir(cred, dir, name).await.with_context(|| item(name))?;
                }
            }
            lat.push(t.elapsed().as_nanos() as u64);
            self.progress.tick();
        }
        Ok((lat, entries, self.items))
    }
}

fn item(name: &[u8]) -> String {
    format!("item {}", String::from_utf8_lossy(name))
}

/// The server's journal sync counter.
pub async fn journal_syncs(client: &Client, cred: &Credentials) -> Result<u64> {
    let (stats, _) = client
        .stats(cred)
        .await
        .context("reading the server's counters")?;
    Ok(stats.journal_syncs)
}
