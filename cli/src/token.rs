//! `omctl token`: bearer tokens for servers started with `--token-file`.
//!
//! A token is `omt_ID_SECRET` (16 hex digits of public id, then the
//! secret); its line in the token file is `PRINCIPAL omt_ID SALT SHA256
//! [GROUPS]`, with `SHA-256(salt || token)`, so the file holds no token and
//! the server finds a token's line by its id.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use clap::Subcommand;
use serde_json::json;

use crate::Output;

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Makes a new token for PRINCIPAL (`omt_ID_SECRET`, 256 random bits):
    /// prints the token, then its `--token-file` line (only the token with
    /// `--append-to`, which adds the line to that file).
    New {
        principal: String,
        /// The principal's groups, comma-separated.
        #[arg(long, default_value = "")]
        groups: String,
        /// Append the line to this token file (created 0600 if missing).
        #[arg(long)]
        append_to: Option<std::path::PathBuf>,
    },
    /// Prints the token-file line of PRINCIPAL for the token read on stdin
    /// (which must be `omt_ID_SECRET`, as `token new` makes them).
    Hash {
        principal: String,
        /// The principal's groups, comma-separated.
        #[arg(long, default_value = "")]
        groups: String,
    },
}

const PREFIX: &str = "omt_";

/// A name the server accepts for a principal or group.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 256
        && !n
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == ':')
}

/// The token's id, when it is `omt_` + 16 hex digits + `_` + 32 to 128
/// characters of `[A-Za-z0-9_-]` (what the server accepts).
fn token_id(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_at_checked(16)?;
    let secret = secret.strip_prefix('_')?;
    ((32..=128).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && id.bytes().all(|b| b.is_ascii_hexdigit()))
    .then_some(id)
}

fn line(principal: &str, groups: &str, token: &str) -> Result<String> {
    if !valid_name(principal) {
        bail!("PRINCIPAL must be 1 to 256 bytes without whitespace, ',' or ':'");
    }
    let groups: Vec<&str> = groups.split(',').filter(|g| !g.is_empty()).collect();
    if groups.len() > 32 || !groups.iter().all(|g| valid_name(g)) {
        bail!("--groups: at most 32 groups, each 1 to 256 bytes without whitespace or ':'");
    }
    let Some(id) = token_id(token) else {
        bail!(
            "the token must be omt_ID_SECRET: 16 hex digits, then 32 to 128 characters of \
             [A-Za-z0-9_-] (`omctl token new` makes one)"
        );
    };
    let salt: [u8; 16] = rand::random();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&salt);
    ctx.update(token.as_bytes());
    let mut line = format!(
        "{principal} {PREFIX}{} {} {}",
        id.to_ascii_lowercase(),
        hex::encode(salt),
        hex::encode(ctx.finish().as_ref())
    );
    if !groups.is_empty() {
        line.push(' ');
        line.push_str(&groups.join(","));
    }
    Ok(line)
}

/// Appends `line` to the token file at `path` (created 0600), on a line of
/// its own even if the file does not end with a newline.
fn append(path: &Path, line: &str) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut last = [0u8; 1];
    let ends_open = f.seek(SeekFrom::End(0))? > 0 && {
        f.seek(SeekFrom::End(-1))?;
        f.read_exact(&mut last)?;
        last[0] != b'\n'
    };
    if ends_open {
        writeln!(f)?;
    }
    writeln!(f, "{line}")?;
    f.sync_all()?;
    Ok(())
}

pub fn run(cmd: TokenCmd, out: Output) -> Result<()> {
    match cmd {
        TokenCmd::New {
            principal,
            groups,
            append_to,
        } => {
            let id: u64 = rand::random();
            let secret: [u8; 32] = rand::random();
            let token = format!("{PREFIX}{id:016x}_{}", hex::encode(secret));
            let line = line(&principal, &groups, &token)?;
            if let Some(p) = &append_to {
                append(p, &line)?;
            }
            if out == Output::Json {
                let mut v = json!({"token": token, "id": format!("{PREFIX}{id:016x}")});
                if append_to.is_none() {
                    v["line"] = json!(line);
                }
                println!("{v}");
            } else if append_to.is_some() {
                println!("{token}");
            } else {
                println!("{token}\n{line}");
            }
        }
        TokenCmd::Hash { principal, groups } => {
            let mut token = String::new();
            std::io::stdin().read_line(&mut token)?;
            let token = token.trim_end_matches(['\r', '\n']);
            if token.is_empty() {
                bail!("no token on stdin");
            }
            println!("{}", line(&principal, &groups, token)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_token_id_and_hold_no_secret() {
        let t = "omt_00000000000000AB_abcdefabcdefabcdefabcdefabcdefabcdef";
        let l = line("alice", "eng,ops", t).unwrap();
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f[0], "alice");
        assert_eq!(f[1], "omt_00000000000000ab");
        assert_eq!(f[4], "eng,ops");
        assert!(!l.contains("abcdefabcdef"));
        assert!(line("al ice", "", t).is_err());
        assert!(line("alice", "", "s3cret").is_err());
        assert!(line("alice", "a:b", t).is_err());
    }
}
