use std::path::{Path, PathBuf};

use super::*;
use crate::env::MapEnv;

#[test]
fn xdg_config_home_comes_first() {
    let env = MapEnv::new()
        .with(names::XDG_CONFIG_HOME, "/x/config")
        .with(names::HOME, "/home/u");
    let paths = StatePaths::resolve(&env).unwrap();
    assert_eq!(paths.base(), Path::new("/x/config"));
    assert_eq!(paths.relay_dir(), Path::new("/x/config/relay"));
    assert_eq!(paths.daemon_dir(), Path::new("/x/config/relay/daemon"));
    assert_eq!(
        paths.machine_key_file(),
        Path::new("/x/config/relay/daemon/machine-identity.pk8")
    );
    assert_eq!(
        paths.daemon_key_file(),
        Path::new("/x/config/relay/daemon/daemon-identity.pk8")
    );
    assert_eq!(paths.pins_dir(), Path::new("/x/config/relay/daemon/pins"));
    assert_eq!(
        paths.token_file(),
        Path::new("/x/config/relay/.client-token")
    );
    assert_eq!(paths.logs_dir(), Path::new("/x/config/relay/logs"));
    assert_eq!(
        paths.user_config_file(),
        Path::new("/x/config/relay/config.toml")
    );
    assert_eq!(
        paths.user_plugins_file(),
        Path::new("/x/config/relay/plugins.toml")
    );
}

#[test]
fn empty_or_relative_xdg_falls_back_to_home() {
    for xdg in ["", "relative/config"] {
        let env = MapEnv::new()
            .with(names::XDG_CONFIG_HOME, xdg)
            .with(names::HOME, "/home/u")
            .with(names::USERPROFILE, "/users/u");
        let paths = StatePaths::resolve(&env).unwrap();
        assert_eq!(paths.base(), Path::new("/home/u/.config"), "xdg={xdg:?}");
    }
}

#[test]
fn userprofile_is_the_last_choice() {
    let env = MapEnv::new()
        .with(names::HOME, "")
        .with(names::USERPROFILE, "/users/u");
    let paths = StatePaths::resolve(&env).unwrap();
    assert_eq!(paths.base(), Path::new("/users/u/.config"));
}

#[test]
fn no_base_is_a_typed_error() {
    let env = MapEnv::new().with(names::HOME, "");
    assert!(matches!(StatePaths::resolve(&env), Err(PathsError::NoBase)));
}

#[test]
fn system_config_dir_can_be_overridden() {
    let env = MapEnv::new().with(names::RELAY_SYSTEM_CONFIG_DIR, "/opt/relay/etc");
    assert_eq!(system_config_dir(&env), PathBuf::from("/opt/relay/etc"));
    assert_eq!(
        provisioned_daemon_key_file(&env),
        PathBuf::from("/opt/relay/etc/daemon-identity.pub")
    );
    #[cfg(not(windows))]
    assert_eq!(
        system_config_dir(&MapEnv::new()),
        PathBuf::from("/etc/relay")
    );
}
