//! Waking the export when the agent's branch may have moved: inotify on the
//! directories that hold its ref files (the agent's git directory is a host
//! directory; what git inside gVisor writes there raises host inotify
//! events), with a slow poll behind it. A wake-up is only a hint: the caller
//! compares the ref files' contents ([`super::sync::branch_fingerprint`])
//! before it exports anything, so a missed, spurious or provoked event can
//! delay an export by at most [`FALLBACK_POLL`], never cause or skip one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent};
use tokio::sync::mpsc;

use super::GitLayout;

/// With inotify: how often the ref files are still compared without an
/// event (the event queue can overflow; a watch can miss the moment a
/// directory the agent removed is made again).
pub const FALLBACK_POLL: Duration = Duration::from_millis(500);
/// Without inotify (not available, or the watcher ended): the poll of
/// before.
pub const POLL_WITHOUT_INOTIFY: Duration = Duration::from_millis(100);
/// At most one wake-up per this interval, however many events the agent
/// causes: a flood of writes in its git directory costs the host no more
/// than a fast poll.
const MIN_GAP: Duration = Duration::from_millis(20);

/// Why [`RefWatch::changed`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// An event about the ref files.
    Event,
    /// The poll interval passed without one.
    Poll,
}

/// Wakes the export loop when the agent's ref files may have changed.
pub struct RefWatch {
    /// From the watcher thread; `None` (or closed) without inotify.
    wakes: Option<mpsc::Receiver<()>>,
}

/// What the watcher thread watches.
struct Watched {
    /// The directories whose entries hold the branch's ref: the git
    /// directory (`packed-refs`) and each level down to the loose ref's.
    directories: Vec<PathBuf>,
    /// The entries of those directories that matter: `packed-refs`, each
    /// directory on the way and the loose ref. Events about anything else
    /// (the index, lock files, `COMMIT_EDITMSG`) wake nothing.
    names: Vec<OsString>,
}

impl RefWatch {
    /// Sets the watches (before the caller's first comparison, so no change
    /// falls between) and starts the thread that reads their events.
    pub fn new(layout: &GitLayout) -> RefWatch {
        RefWatch::of(&layout.agent_git_dir, &layout.branch_ref())
    }

    /// The watch of `branch_ref` (`refs/heads/...`) in the git directory `git_dir`.
    fn of(git_dir: &Path, branch_ref: &str) -> RefWatch {
        let watched = Watched::of(git_dir, branch_ref);
        let started = Inotify::init(InitFlags::IN_CLOEXEC).map_err(std::io::Error::from).and_then(|inotify| {
            if !watched.watch(&inotify) {
                return Err(std::io::Error::other("cannot watch the agent's git directory"));
            }
            let (sender, receiver) = mpsc::channel(1);
            std::thread::Builder::new().name("agent-ref-watch".into()).spawn(move || watched.run(&inotify, &sender))?;
            Ok(receiver)
        });
        match started {
            Ok(receiver) => RefWatch { wakes: Some(receiver) },
            Err(error) => {
                tracing::warn!(%error, "no inotify on the agent's refs; they are polled every {POLL_WITHOUT_INOTIFY:?}");
                RefWatch { wakes: None }
            }
        }
    }

    /// Returns when the ref files may have changed: after an event about
    /// them, or after the poll interval.
    pub async fn changed(&mut self) -> Wake {
        let Some(wakes) = &mut self.wakes else {
            tokio::time::sleep(POLL_WITHOUT_INOTIFY).await;
            return Wake::Poll;
        };
        tokio::select! {
            woken = wakes.recv() => {
                if woken.is_none() {
                    tracing::warn!("the watcher of the agent's refs ended; they are polled every {POLL_WITHOUT_INOTIFY:?}");
                    self.wakes = None;
                    return Wake::Poll;
                }
                Wake::Event
            }
            _ = tokio::time::sleep(FALLBACK_POLL) => Wake::Poll,
        }
    }
}

impl Watched {
    fn of(git_dir: &Path, branch_ref: &str) -> Watched {
        let mut directories = vec![git_dir.to_path_buf()];
        let mut directory = git_dir.to_path_buf();
        let mut names = vec![OsString::from("packed-refs")];
        let components: Vec<&str> = branch_ref.split('/').collect();
        for (index, component) in components.iter().enumerate() {
            names.push(OsString::from(component));
            if index + 1 < components.len() {
                directory.push(component);
                directories.push(directory.clone());
            }
        }
        Watched { directories, names }
    }

    /// (Re)sets the watches: a directory the agent removed and made again is
    /// a new inode; adding a watch to a watched inode only renews it. Never
    /// follows a symlink the agent planted. Returns whether the git
    /// directory itself (a mount point the agent cannot replace) is watched.
    fn watch(&self, inotify: &Inotify) -> bool {
        let mask = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        let watched: Vec<bool> = self.directories.iter().map(|directory| inotify.add_watch(directory.as_path(), mask).is_ok()).collect();
        watched.first().copied().unwrap_or(false)
    }

    /// Whether an event may mean a changed ref: one about a relevant name,
    /// a watched directory going away, or lost events.
    fn matters(&self, event: &InotifyEvent) -> bool {
        let lost = AddWatchFlags::IN_Q_OVERFLOW | AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF;
        event.mask.intersects(lost) || event.name.as_ref().is_some_and(|name| self.names.contains(name))
    }

    /// The watcher thread: reads events (blocking), renews the watches after
    /// each batch and only then wakes the export loop, so every change after
    /// the renewal raises an event and every change before it is seen by the
    /// comparison the wake-up causes. Ends when the export loop is gone.
    fn run(&self, inotify: &Inotify, wakes: &mpsc::Sender<()>) {
        loop {
            let events = match inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EINTR) => continue,
                Err(error) => {
                    tracing::warn!(%error, "cannot read inotify events of the agent's refs");
                    return;
                }
            };
            if !events.iter().any(|event| self.matters(event)) {
                continue;
            }
            self.watch(inotify);
            match wakes.try_send(()) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(())) => {}
                Err(mpsc::error::TrySendError::Closed(())) => return,
            }
            std::thread::sleep(MIN_GAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRANCH: &str = "refs/heads/lazaret/agent-test";

    /// Whether an event wakes `watch` (polls in between are waited through,
    /// up to a generous bound: the time it takes is not the point).
    async fn woken_by_an_event(watch: &mut RefWatch) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if watch.changed().await == Wake::Event {
                return true;
            }
        }
        false
    }

    /// Writes `path` as git does: a lock file, renamed into place.
    fn write_like_git(path: &Path, contents: &str) {
        let lock = path.with_extension("lock");
        std::fs::write(&lock, contents).expect("write lock");
        std::fs::rename(&lock, path).expect("rename");
    }

    #[tokio::test]
    async fn a_moved_ref_wakes_at_once_and_other_writes_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let git_dir = dir.path();
        std::fs::create_dir_all(git_dir.join("refs/heads/lazaret")).expect("mkdir");
        let mut watch = RefWatch::of(git_dir, BRANCH);
        assert!(watch.wakes.is_some(), "inotify is available here");

        // The index, lock files and other branches: no wake-up before the fallback poll.
        std::fs::create_dir_all(git_dir.join("refs/heads/other")).expect("mkdir");
        std::fs::write(git_dir.join("index.lock"), b"x").expect("write");
        std::fs::rename(git_dir.join("index.lock"), git_dir.join("index")).expect("rename");
        write_like_git(&git_dir.join("refs/heads/other/branch"), "1\n");
        assert_eq!(watch.changed().await, Wake::Poll, "woken by unrelated writes");

        // The loose ref, then packed-refs.
        let task = tokio::spawn(async move {
            let woken = woken_by_an_event(&mut watch).await;
            (watch, woken)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        write_like_git(&git_dir.join(BRANCH), "2\n");
        let (mut watch, woken) = task.await.expect("task");
        assert!(woken, "the loose ref wakes the export");
        let task = tokio::spawn(async move {
            let woken = woken_by_an_event(&mut watch).await;
            (watch, woken)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        write_like_git(&git_dir.join("packed-refs"), "3\n");
        let (mut watch, woken) = task.await.expect("task");
        assert!(woken, "packed-refs wakes the export");

        // A directory on the way removed and made again: watched again.
        std::fs::remove_dir_all(git_dir.join("refs/heads/lazaret")).expect("rm");
        while watch.changed().await == Wake::Event {}
        std::fs::create_dir_all(git_dir.join("refs/heads/lazaret")).expect("mkdir");
        assert!(woken_by_an_event(&mut watch).await, "the new directory wakes the export");
        let task = tokio::spawn(async move {
            let woken = woken_by_an_event(&mut watch).await;
            (watch, woken)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        write_like_git(&git_dir.join(BRANCH), "4\n");
        let (_watch, woken) = task.await.expect("task");
        assert!(woken, "a ref in the new directory wakes the export");
    }

    #[tokio::test]
    async fn without_inotify_it_polls_fast() {
        let mut watch = RefWatch { wakes: None };
        tokio::time::pause();
        let started = tokio::time::Instant::now();
        assert_eq!(watch.changed().await, Wake::Poll);
        // Virtual time (paused): exact, however loaded the machine.
        let elapsed = started.elapsed();
        assert!(elapsed >= POLL_WITHOUT_INOTIFY && elapsed < FALLBACK_POLL, "the fast poll, not the fallback one: {elapsed:?}");
    }
}
