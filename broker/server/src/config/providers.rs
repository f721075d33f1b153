//! Kafka's config providers (KIP-297, KIP-421, KIP-887): a value may hold `${provider:key}` or
//! `${provider:path:key}`, resolved once at startup from the providers `config.providers` names.
//! Kafka's three built-in classes are understood by their class names:
//!
//! - `org.apache.kafka.common.config.provider.FileConfigProvider`: `${file:/a.properties:key}`
//!   is `key` of that properties file;
//! - `org.apache.kafka.common.config.provider.DirectoryConfigProvider`: `${dir:/secrets:name}`
//!   is the contents of the file `name` in that directory (a mounted Secret);
//! - `org.apache.kafka.common.config.provider.EnvVarConfigProvider`: `${env:NAME}` is the
//!   environment variable.
//!
//! As in Kafka, a reference to a provider that is not configured stays as written. Unlike Kafka,
//! a configured provider that cannot answer (no such file, key or variable) stops startup naming
//! the key: Kafka leaves the text unreplaced, which then fails (or worse, is used) later.

use std::collections::BTreeMap;
use std::path::Path;

use super::ConfigError;
use super::parse::parse_properties;

pub const FILE: &str = "org.apache.kafka.common.config.provider.FileConfigProvider";
pub const DIRECTORY: &str = "org.apache.kafka.common.config.provider.DirectoryConfigProvider";
pub const ENV: &str = "org.apache.kafka.common.config.provider.EnvVarConfigProvider";

/// Whether `key` configures a provider (`config.providers.<name>.class` or `.param.<p>`).
pub fn is_provider_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("config.providers.") else {
        return false;
    };
    rest.split_once('.').is_some_and(|(name, k)| !name.is_empty() && (k == "class" || k.starts_with("param.")))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Provider {
    File,
    Directory,
    Env,
}

/// Replaces every `${provider:[path:]key}` of a configured provider in `map`'s values.
/// `env`: the environment (a parameter so tests need not touch the process's).
pub fn resolve(map: &mut BTreeMap<String, String>, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let names: Vec<String> = map
        .get("config.providers")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    // Kafka's provider parameters restrict what may be read (`allowlist.pattern`,
    // `allowed.paths`): refused rather than accepted and not enforced.
    if let Some(key) = map.keys().find(|k| k.starts_with("config.providers.") && k.contains(".param.")) {
        return Err(ConfigError::Inconsistent {
            key: key.clone(),
            reason: "config provider parameters (allowlist.pattern, allowed.paths) are not supported: remove it".into(),
        });
    }
    let mut providers = BTreeMap::new();
    for name in names {
        let key = format!("config.providers.{name}.class");
        let class = map.get(&key).map(|s| s.trim().to_string()).ok_or_else(|| ConfigError::Inconsistent {
            key: "config.providers".into(),
            reason: format!("names provider `{name}` but {key} is not set"),
        })?;
        let p = match class.as_str() {
            FILE => Provider::File,
            DIRECTORY => Provider::Directory,
            ENV => Provider::Env,
            _ => {
                return Err(ConfigError::Invalid {
                    key,
                    value: class,
                    accepted: format!("{FILE}, {DIRECTORY} or {ENV}"),
                });
            }
        };
        providers.insert(name, p);
    }
    if providers.is_empty() {
        return Ok(());
    }
    let mut files: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (key, value) in map.iter_mut() {
        if key.starts_with("config.providers") || !value.contains("${") {
            continue;
        }
        *value = substitute(key, value, &providers, &mut files, env)?;
    }
    Ok(())
}

fn substitute(
    key: &str,
    value: &str,
    providers: &BTreeMap<String, Provider>,
    files: &mut BTreeMap<String, BTreeMap<String, String>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let fail = |reason: String| ConfigError::Inconsistent { key: key.into(), reason };
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let reference = &after[..end];
        let whole = &rest[start..start + 2 + end + 1];
        rest = &after[end + 1..];
        let Some((name, tail)) = reference.split_once(':') else {
            out.push_str(whole);
            continue;
        };
        let Some(provider) = providers.get(name) else {
            out.push_str(whole);
            continue;
        };
        let (path, item) = match tail.split_once(':') {
            Some((p, k)) => (Some(p), k),
            None => (None, tail),
        };
        let resolved = match (provider, path) {
            (Provider::Env, None) => {
                env(item).ok_or_else(|| fail(format!("{whole}: no environment variable {item}")))?
            }
            (Provider::Env, Some(_)) => {
                return Err(fail(format!("{whole}: expected ${{{name}:NAME}}, without a path")));
            }
            (Provider::File, Some(path)) => {
                if !files.contains_key(path) {
                    let text = std::fs::read_to_string(path)
                        .map_err(|e| ConfigError::File { path: path.into(), reason: format!("{e} (for {key})") })?;
                    files.insert(path.into(), parse_properties(&text));
                }
                files
                    .get(path)
                    .and_then(|f| f.get(item))
                    .cloned()
                    .ok_or_else(|| fail(format!("{whole}: {path} has no key {item}")))?
            }
            (Provider::Directory, Some(dir)) => {
                if item.contains('/') || item == ".." {
                    return Err(fail(format!("{whole}: {item} is not a file name")));
                }
                let path = Path::new(dir).join(item);
                std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
                    path: path.display().to_string(),
                    reason: format!("{e} (for {key})"),
                })?
            }
            (Provider::File | Provider::Directory, None) => {
                return Err(fail(format!("{whole}: expected ${{{name}:PATH:KEY}}")));
            }
        };
        out.push_str(&resolved);
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn env(name: &str) -> Option<String> {
        (name == "HOST_IP").then(|| "10.0.0.7".to_string())
    }

    #[test]
    fn file_dir_and_env_references_resolve() {
        let dir = std::env::temp_dir().join(format!("oxbow-providers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("addresses.properties");
        std::fs::write(&file, "ext.0.port=31000\next.0.host=lb.example.com\n").unwrap();
        std::fs::write(dir.join("password"), "s3cret").unwrap();
        let f = file.display().to_string();
        let d = dir.display().to_string();
        let mut m = map(&[
            ("config.providers", "file,dir, env"),
            ("config.providers.file.class", FILE),
            ("config.providers.dir.class", DIRECTORY),
            ("config.providers.env.class", ENV),
            (
                "advertised.listeners",
                &format!("EXT://${{file:{f}:ext.0.host}}:${{file:{f}:ext.0.port}},NP://${{env:HOST_IP}}:1"),
            ),
            ("ssl.keystore.password", &format!("${{dir:{d}:password}}")),
            ("untouched", "${vault:x:y} and $plain"),
        ]);
        resolve(&mut m, &env).unwrap();
        assert_eq!(m["advertised.listeners"], "EXT://lb.example.com:31000,NP://10.0.0.7:1");
        assert_eq!(m["ssl.keystore.password"], "s3cret");
        assert_eq!(m["untouched"], "${vault:x:y} and $plain");

        let mut missing = map(&[
            ("config.providers", "file"),
            ("config.providers.file.class", FILE),
            ("advertised.listeners", &format!("EXT://${{file:{f}:ext.1.host}}:1")),
        ]);
        let e = resolve(&mut missing, &env).unwrap_err().to_string();
        assert!(e.contains("advertised.listeners") && e.contains("no key ext.1.host"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_providers_values_stay_as_written() {
        let mut m = map(&[("advertised.listeners", "X://${file:/nope:k}:1")]);
        resolve(&mut m, &env).unwrap();
        assert_eq!(m["advertised.listeners"], "X://${file:/nope:k}:1");
    }

    #[test]
    fn an_unknown_class_or_a_missing_class_stops_startup() {
        let mut m = map(&[("config.providers", "v"), ("config.providers.v.class", "com.example.Vault")]);
        assert!(matches!(resolve(&mut m, &env), Err(ConfigError::Invalid { .. })));
        let mut m = map(&[("config.providers", "v")]);
        assert!(matches!(resolve(&mut m, &env), Err(ConfigError::Inconsistent { .. })));
        let mut m = map(&[
            ("config.providers", "env"),
            ("config.providers.env.class", ENV),
            ("config.providers.env.param.allowlist.pattern", "^HOST_.*"),
        ]);
        let e = resolve(&mut m, &env).unwrap_err().to_string();
        assert!(e.contains("config.providers.env.param.allowlist.pattern") && e.contains("not supported"), "{e}");
        let mut m =
            map(&[("config.providers", "env"), ("config.providers.env.class", ENV), ("x", "${env:/p:HOST_IP}")]);
        assert!(resolve(&mut m, &env).unwrap_err().to_string().contains("without a path"));
        assert!(is_provider_key("config.providers.file.class"));
        assert!(is_provider_key("config.providers.env.param.allowlist.pattern"));
        assert!(!is_provider_key("config.providers.file"));
    }
}
