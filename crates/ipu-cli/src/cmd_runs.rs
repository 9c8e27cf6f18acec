//! `ipu runs list|show ID|compare A B`: the runs kept in the run database.

use std::path::PathBuf;

use anyhow::bail;
use ipu_insight::db;

use crate::insight_run::{db_path, open_db};

/// The database to read.
#[derive(clap::Args)]
pub struct DbPathArgs {
    /// The run database (default: $XDG_DATA_HOME/ipu-stack/runs.sqlite, else
    /// ~/.local/share/ipu-stack/runs.sqlite).
    #[arg(long, value_name = "PATH", global = true)]
    db: Option<PathBuf>,
}

/// `ipu runs`.
#[derive(clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
    #[command(flatten)]
    db: DbPathArgs,
}

#[derive(clap::Subcommand)]
enum RunsCommand {
    /// One line per run, newest first, with its id.
    List,
    /// Everything recorded of one run.
    Show {
        /// The run's id.
        id: i64,
    },
    /// Two runs side by side: cycles per step, memory per region, errors, with the delta.
    Compare {
        /// The first run's id (A).
        a: i64,
        /// The second run's id (B).
        b: i64,
    },
}

/// `ipu runs`.
pub fn runs(a: RunsArgs) -> anyhow::Result<u8> {
    let path = db_path(a.db.db.as_deref())?;
    if !path.exists() {
        bail!(
            "{}: no run database here (runs are recorded by `ipu run` and `ipu exec`)",
            path.display()
        );
    }
    let d = open_db(&path)?;
    let get = |id: i64| -> anyhow::Result<db::RunRecord> {
        match d.get(id)? {
            Some(r) => Ok(r),
            None => bail!(
                "{}: no run with id {id} (`ipu runs list` shows them)",
                path.display()
            ),
        }
    };
    match a.command {
        RunsCommand::List => {
            for r in d.list()? {
                println!("{}", db::list_line(&r));
            }
        }
        RunsCommand::Show { id } => print!("{}", db::show(&get(id)?)),
        RunsCommand::Compare { a, b } => print!("{}", db::compare(&get(a)?, &get(b)?)),
    }
    Ok(0)
}
