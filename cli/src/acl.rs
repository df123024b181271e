//! `omctl acl get|set|add|remove TARGET [GRANT...]` and `omctl whoami`.
//!
//! TARGET is `/` (the cluster), `VOL` or `VOL/BUCKET` (a leading `/` is
//! allowed). A GRANT is `user:NAME:RIGHTS`, `group:NAME:RIGHTS` or
//! `world::RIGHTS`, as Ozone's shell writes them; RIGHTS are Ozone's letters
//! (r READ, w WRITE, c CREATE, l LIST, d DELETE, x READ_ACL, y WRITE_ACL,
//! a ALL) or comma-separated names (READ,LIST, IMPERSONATE, RECLAIM).

use anyhow::{Result, bail};
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::Output;

#[derive(clap::Subcommand)]
pub enum AclCmd {
    /// Shows the owner and grants of `/`, VOL or VOL/BUCKET.
    Get { target: String },
    /// Replaces every grant with the ones given (none: clears them).
    Set { target: String, grants: Vec<String> },
    /// Adds rights to each grantee's grant.
    Add {
        target: String,
        #[arg(required = true)]
        grants: Vec<String>,
    },
    /// Removes rights from each grantee's grant (dropped once empty).
    Remove {
        target: String,
        #[arg(required = true)]
        grants: Vec<String>,
    },
}

const LETTERS: [(char, AclRight); 8] = [
    ('r', AclRight::Read),
    ('w', AclRight::Write),
    ('c', AclRight::Create),
    ('l', AclRight::List),
    ('d', AclRight::Delete),
    ('x', AclRight::ReadAcl),
    ('y', AclRight::WriteAcl),
    ('a', AclRight::All),
];

const NAMES: [(&str, AclRight); 10] = [
    ("READ", AclRight::Read),
    ("WRITE", AclRight::Write),
    ("CREATE", AclRight::Create),
    ("LIST", AclRight::List),
    ("DELETE", AclRight::Delete),
    ("READ_ACL", AclRight::ReadAcl),
    ("WRITE_ACL", AclRight::WriteAcl),
    ("ALL", AclRight::All),
    ("IMPERSONATE", AclRight::Impersonate),
    ("RECLAIM", AclRight::Reclaim),
];

/// `/` → the cluster, `VOL` → a volume, `VOL/BUCKET` → a bucket.
pub fn parse_target(t: &str) -> Result<(String, String)> {
    let t = t.strip_prefix('/').unwrap_or(t);
    let parts: Vec<&str> = if t.is_empty() {
        Vec::new()
    } else {
        t.split('/').collect()
    };
    match parts[..] {
        [] => Ok((String::new(), String::new())),
        [v] if !v.is_empty() => Ok((v.to_string(), String::new())),
        [v, b] if !v.is_empty() && !b.is_empty() => Ok((v.to_string(), b.to_string())),
        _ => bail!("{t:?}: expected /, VOL or VOL/BUCKET"),
    }
}

fn parse_rights(s: &str) -> Result<Vec<i32>> {
    let mut out = Vec::new();
    if s.chars().all(|c| c.is_ascii_lowercase()) && !s.is_empty() {
        for c in s.chars() {
            match LETTERS.iter().find(|(l, _)| *l == c) {
                Some((_, r)) => out.push(*r as i32),
                None => bail!("unknown right letter {c:?} (r w c l d x y a)"),
            }
        }
        return Ok(out);
    }
    for name in s.split(',').filter(|n| !n.is_empty()) {
        match NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, r)) => out.push(*r as i32),
            None => bail!(
                "unknown right {name:?} (READ, WRITE, CREATE, LIST, DELETE, READ_ACL, \
                 WRITE_ACL, ALL, IMPERSONATE, RECLAIM)"
            ),
        }
    }
    if out.is_empty() {
        bail!("a grant needs rights");
    }
    Ok(out)
}

/// `user:NAME:RIGHTS`, `group:NAME:RIGHTS` or `world::RIGHTS`.
pub fn parse_grant(s: &str) -> Result<AclGrant> {
    let parts: Vec<&str> = s.splitn(3, ':').collect();
    let [kind, name, rights] = parts[..] else {
        bail!("{s:?}: expected user:NAME:RIGHTS, group:NAME:RIGHTS or world::RIGHTS");
    };
    let kind = match kind.to_ascii_lowercase().as_str() {
        "user" | "u" => GranteeKind::User,
        "group" | "g" => GranteeKind::Group,
        "world" | "w" => GranteeKind::World,
        other => bail!("{other:?}: the grantee kind is user, group or world"),
    };
    Ok(AclGrant {
        kind: kind as i32,
        name: name.to_string(),
        rights: parse_rights(rights)?,
    })
}

fn kind_name(k: i32) -> &'static str {
    match GranteeKind::try_from(k) {
        Ok(GranteeKind::User) => "user",
        Ok(GranteeKind::Group) => "group",
        Ok(GranteeKind::World) => "world",
        _ => "unknown",
    }
}

fn right_names(g: &AclGrant) -> Vec<&'static str> {
    g.rights
        .iter()
        .filter_map(|r| NAMES.iter().find(|(_, x)| *x as i32 == *r).map(|(n, _)| *n))
        .collect()
}

/// A grant as `omctl` prints (and reads) it.
pub fn grant_text(g: &AclGrant) -> String {
    format!(
        "{}:{}:{}",
        kind_name(g.kind),
        g.name,
        right_names(g).join(",")
    )
}

fn grants_json(grants: &[AclGrant]) -> Value {
    Value::Array(
        grants
            .iter()
            .map(|g| json!({"kind": kind_name(g.kind), "name": g.name, "rights": right_names(g)}))
            .collect(),
    )
}

fn print_acl(out: Output, target: &str, owner: &str, grants: &[AclGrant]) {
    if out == Output::Json {
        println!(
            "{}",
            json!({"target": target, "owner": owner, "grants": grants_json(grants)})
        );
        return;
    }
    println!("target: {target}");
    if !owner.is_empty() {
        println!("owner:  {owner}");
    }
    if grants.is_empty() {
        println!("grants: (none)");
    }
    for g in grants {
        println!("grant:  {}", grant_text(g));
    }
}

pub async fn run(c: &OmClient, out: Output, cmd: AclCmd) -> Result<()> {
    let (target, mode, grants) = match cmd {
        AclCmd::Get { target } => {
            let (volume, bucket) = parse_target(&target)?;
            let r = c
                .get_acl(GetAclRequest {
                    volume,
                    bucket,
                    ..Default::default()
                })
                .await?;
            print_acl(out, &target, &r.owner, &r.grants);
            return Ok(());
        }
        AclCmd::Set { target, grants } => (target, AclMode::Set, grants),
        AclCmd::Add { target, grants } => (target, AclMode::Add, grants),
        AclCmd::Remove { target, grants } => (target, AclMode::Remove, grants),
    };
    let (volume, bucket) = parse_target(&target)?;
    let grants = grants
        .iter()
        .map(|g| parse_grant(g))
        .collect::<Result<Vec<_>>>()?;
    let r = c
        .set_acl(SetAclRequest {
            volume,
            bucket,
            mode: mode as i32,
            grants,
            ..Default::default()
        })
        .await?;
    print_acl(out, &target, &r.owner, &r.grants);
    Ok(())
}

pub async fn whoami(c: &OmClient, out: Output) -> Result<()> {
    let w = c.who_am_i().await?;
    if out == Output::Json {
        println!(
            "{}",
            json!({"user": w.user, "groups": w.groups, "impersonated_by": w.impersonated_by,
                   "via": w.via, "admin": w.admin})
        );
        return Ok(());
    }
    println!("user:   {}", w.user);
    if !w.groups.is_empty() {
        println!("groups: {}", w.groups.join(","));
    }
    if !w.impersonated_by.is_empty() {
        println!("impersonated by: {}", w.impersonated_by);
    }
    println!("via:    {}", w.via);
    println!("admin:  {}", w.admin);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_grants_parse_as_ozone_writes_them() {
        assert_eq!(parse_target("/").unwrap(), (String::new(), String::new()));
        assert_eq!(parse_target("v").unwrap(), ("v".into(), String::new()));
        assert_eq!(parse_target("/v/b").unwrap(), ("v".into(), "b".into()));
        assert!(parse_target("v/b/k").is_err());
        let g = parse_grant("user:alice:rl").unwrap();
        assert_eq!(g.rights, vec![AclRight::Read as i32, AclRight::List as i32]);
        assert_eq!(grant_text(&g), "user:alice:READ,LIST");
        let g = parse_grant("world::READ,list").unwrap();
        assert_eq!((g.kind, g.name.as_str()), (GranteeKind::World as i32, ""));
        assert_eq!(
            parse_grant("group:gw:IMPERSONATE").unwrap().rights,
            vec![AclRight::Impersonate as i32]
        );
        assert!(parse_grant("user:alice").is_err());
        assert!(parse_grant("user:alice:rq").is_err());
        assert!(parse_grant("team:x:r").is_err());
    }
}
