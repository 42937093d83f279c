//! [`Settings`]: the repository-wide inputs of the conversions (`core.autocrlf`, `core.eol`,
//! the attributes files outside the tree, the filter drivers), as the state records them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gix::bstr::{BString, ByteSlice};
use gix::filter::plumbing as filter;
use serde::{Deserialize, Serialize};

use super::{Error, RULES};
use crate::lfs::LfsMode;

/// A filter driver as the repository's config defines it (`filter.NAME.*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriverConfig {
    /// `filter.NAME.smudge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smudge: Option<String>,
    /// `filter.NAME.process`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Whether `filter.NAME.clean` is set (git then converts the file in memory, which
    /// changes its `ident` rules).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clean: bool,
    /// `filter.NAME.required`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// The repository-wide inputs of the conversions, as the state records them: two runs with
/// equal settings convert every file the same way, so only paths whose blob or attributes
/// changed are written. When they differ, every file is re-evaluated once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Settings {
    /// `core.autocrlf` (`true`, `input`, `false`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autocrlf: Option<String>,
    /// `core.eol` (`lf`, `crlf`, `native`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eol: Option<String>,
    /// The text of the global attributes file (`core.attributesFile`, else
    /// `$XDG_CONFIG_HOME/git/attributes`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes_file: Option<String>,
    /// The text of the repository's `info/attributes`, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_attributes: Option<String>,
    /// The filter drivers of the repository's config, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drivers: BTreeMap<String, DriverConfig>,
    /// `git archive` semantics (`--export`): `export-ignore` paths are left out and
    /// `export-subst` placeholders expanded. Not read from the repository: the sync sets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub export: bool,
    /// What files git stores as Git LFS pointers (`filter=lfs`) are written as: their content
    /// from the repository's LFS store (`content`, the default, left out of the state) or the
    /// pointer files (`pointers`). Not read from the repository: the sync's `--lfs` sets it.
    #[serde(default, skip_serializing_if = "is_content")]
    pub lfs: LfsMode,
    /// The conversion rules the files were written with ([`RULES`]; 0 in a state an older
    /// treesync wrote).
    #[serde(default)]
    pub rules: u32,
}

/// Whether `mode` is the default, [`LfsMode::Content`] (not recorded).
fn is_content(mode: &LfsMode) -> bool {
    *mode == LfsMode::Content
}

impl Settings {
    /// The settings `repo` has now.
    pub fn of(repo: &crate::Repo) -> Result<Settings, Error> {
        let r = repo.thread_local();
        let config_err = |message: String| Error::Config { repo: repo.path().to_path_buf(), message };
        let snapshot = r.config_snapshot();
        let get = |key: &str| snapshot.string(key).map(|v| v.to_str_lossy().into_owned());
        let options = gix::filter::Pipeline::options(&r).map_err(|e| config_err(e.to_string()))?;
        let drivers = options
            .drivers
            .iter()
            .map(|d| {
                let s = |v: &Option<BString>| v.as_ref().map(|v| v.to_str_lossy().into_owned());
                (
                    d.name.to_str_lossy().into_owned(),
                    DriverConfig {
                        smudge: s(&d.smudge),
                        process: s(&d.process),
                        clean: d.clean.is_some(),
                        required: d.required,
                    },
                )
            })
            .collect();
        let attributes_path = match snapshot.trusted_path("core.attributesFile") {
            Ok(Some(p)) => Some(p),
            Ok(None) => std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
                .map(|d| d.join("git").join("attributes")),
            Err(e) => return Err(config_err(format!("core.attributesFile: {e}"))),
        };
        let read = |p: Option<PathBuf>| -> Result<Option<String>, Error> {
            let Some(p) = p else { return Ok(None) };
            match std::fs::read(&p) {
                Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(Error::Attributes { what: p.display().to_string(), source }),
            }
        };
        Ok(Settings {
            autocrlf: get("core.autocrlf"),
            eol: get("core.eol"),
            attributes_file: read(attributes_path)?,
            info_attributes: read(Some(r.common_dir().join("info").join("attributes")))?,
            drivers,
            export: false,
            lfs: LfsMode::Content,
            rules: RULES,
        })
    }

    /// `core.autocrlf` and `core.eol` as gitoxide's pipeline takes them (values git does not
    /// know count as unset, as they do for git).
    pub(super) fn eol_config(&self) -> filter::eol::Configuration {
        let truthy = |v: &str| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1");
        let auto_crlf = match self.autocrlf.as_deref() {
            Some(v) if v.eq_ignore_ascii_case("input") => filter::eol::AutoCrlf::Input,
            Some(v) if truthy(v) => filter::eol::AutoCrlf::Enabled,
            _ => filter::eol::AutoCrlf::Disabled,
        };
        let eol = match self.eol.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("lf") => Some(filter::eol::Mode::Lf),
            Some("crlf") => Some(filter::eol::Mode::CrLf),
            _ => None,
        };
        filter::eol::Configuration { auto_crlf, eol }
    }

    /// Whether files without any attribute are converted too (`core.autocrlf=true`: text files
    /// get CRLF).
    pub(super) fn converts_every_file(&self) -> bool {
        self.eol_config().auto_crlf == filter::eol::AutoCrlf::Enabled
    }

    /// The pipeline options these settings make.
    pub(super) fn pipeline_options(&self) -> filter::pipeline::Options {
        filter::pipeline::Options {
            drivers: self
                .drivers
                .iter()
                .map(|(name, d)| filter::Driver {
                    name: name.as_str().into(),
                    clean: None,
                    smudge: d.smudge.as_deref().map(Into::into),
                    process: d.process.as_deref().map(Into::into),
                    required: d.required,
                })
                .collect(),
            eol_config: self.eol_config(),
            ..Default::default()
        }
    }
}
