//! A program run in a detached tmux session, for the tests that need a terminal (an
//! editor, `cat` reading keys). Each session has a tmux server of its own (`-L`): tests
//! run in parallel, and on one shared server a session started while the last other one
//! ended raced the server's exit ("server exited unexpectedly"). The server is killed
//! when the session is dropped, so a failing test leaves none behind.

use std::process::{Command, Output};
use std::time::Duration;

use super::mount::eventually;

pub struct Session {
    name: String,
    /// The server's socket file, removed with the server.
    socket: Option<std::path::PathBuf>,
}

impl Session {
    /// Starts `cmd` (a shell command line) in an 80x24 session named after `label` and
    /// this process.
    pub fn start(label: &str, cmd: &str) -> Self {
        let name = format!("litanyfs-{label}-{}", std::process::id());
        let mut s = Session { name, socket: None };
        let started = s.tmux(&[
            "new-session",
            "-d",
            "-s",
            &s.name,
            "-x",
            "80",
            "-y",
            "24",
            cmd,
        ]);
        assert!(started.status.success(), "tmux: {started:?}");
        let socket = s.tmux(&["display-message", "-p", "#{socket_path}"]);
        s.socket = Some(String::from_utf8_lossy(&socket.stdout).trim().into())
            .filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty());
        s
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.name])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// What the terminal shows now.
    pub fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-t", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether `program` runs in the pane: the pane's process or one of its children
    /// (a shell running `cmd > f` forks, and tmux names only the shell).
    pub fn runs(&self, program: &str) -> bool {
        let out = self.tmux(&["display-message", "-p", "-t", &self.name, "#{pane_pid}"]);
        let Ok(pid) = String::from_utf8_lossy(&out.stdout).trim().parse::<u32>() else {
            return false;
        };
        let comm = |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid.to_string().as_str())
            .chain(children.split_whitespace())
            .any(|p| comm(p).trim_end() == program)
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", &self.name, "-l", text]);
    }

    /// Presses `key` (tmux's names: `Enter`, `C-c`, `C-x`, ...).
    pub fn press(&self, key: &str) {
        self.tmux(&["send-keys", "-t", &self.name, key]);
    }

    /// Whether the program ended (and with it the session) within `limit`.
    pub fn ended_within(&self, limit: Duration) -> bool {
        eventually(limit, || {
            !self
                .tmux(&["has-session", "-t", &self.name])
                .status
                .success()
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
        if let Some(socket) = &self.socket {
            let _ = std::fs::remove_file(socket);
        }
    }
}
