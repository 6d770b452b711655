//! `train.tensorboard`: off by default, `true` for the run directory's `tensorboard/`, or a
//! directory; anything else is refused naming the key.

use boost_config::{Config, TensorBoard};
use std::path::Path;

fn load(sets: &[&str]) -> Result<Config, boost_config::ConfigError> {
    Config::load(None, &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn tensorboard_is_off_true_or_a_directory_and_round_trips() {
    let run = Path::new("runs/x");
    assert_eq!(load(&[]).unwrap().train.tensorboard, TensorBoard::Off);
    assert_eq!(load(&[]).unwrap().train.tensorboard.dir(run), None);
    let on = load(&["train.tensorboard=true"]).unwrap();
    assert_eq!(on.train.tensorboard.dir(run), Some(run.join("tensorboard")));
    let dir = load(&["train.tensorboard=tb/exp 1"]).unwrap();
    assert_eq!(dir.train.tensorboard, TensorBoard::Dir("tb/exp 1".into()));
    assert_eq!(dir.train.tensorboard.dir(run), Some("tb/exp 1".into()));
    for c in [load(&[]).unwrap(), on, dir] {
        assert_eq!(Config::from_toml_str(&c.to_toml()).unwrap(), c);
    }
}

#[test]
fn a_bad_tensorboard_value_names_the_key() {
    for (set, says) in [("train.tensorboard=3", "true, false or a directory path"), ("train.tensorboard=\"\"", "empty")]
    {
        let e = load(&[set]).unwrap_err();
        assert_eq!(e.key, "train.tensorboard", "{set}: {e:?}");
        assert!(e.message.contains(says), "{set}: {}", e.message);
    }
}
