//! Learning rate at each optimizer step: linear warm-up, then cosine, WSD or constant.

use boost_config::{Schedule, TrainConfig};

/// The learning rate of optimizer step `step` (0-based).
pub fn lr_at(cfg: &TrainConfig, step: usize) -> f64 {
    let peak = cfg.lr;
    let min = cfg.lr * cfg.min_lr_ratio;
    if step < cfg.warmup_steps {
        return peak * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let total = if cfg.schedule_steps > 0 { cfg.schedule_steps } else { cfg.steps };
    let last = total.saturating_sub(1).max(1);
    match cfg.schedule {
        Schedule::Constant => peak,
        Schedule::Cosine => {
            let span = last.saturating_sub(cfg.warmup_steps).max(1);
            let progress = ((step - cfg.warmup_steps) as f64 / span as f64).min(1.0);
            min + (peak - min) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        }
        Schedule::Wsd => {
            let decay_steps = ((total as f64) * cfg.decay_fraction).round() as usize;
            let start = total.saturating_sub(decay_steps).max(cfg.warmup_steps);
            if step < start || decay_steps == 0 {
                peak
            } else {
                let span = last.saturating_sub(start).max(1);
                let progress = ((step - start) as f64 / span as f64).min(1.0);
                peak + (min - peak) * progress
            }
        }
    }
}

/// What a resume at `step` (optimizer steps done) does to the learning rate when it changes
/// a schedule key (`train.steps` most often): the schedule is recomputed over the new keys
/// from step 1, so the rate may jump. `None` when no schedule key changes.
pub fn resume_note(saved: &TrainConfig, now: &TrainConfig, step: u64) -> Option<String> {
    let mut changed = Vec::new();
    let mut key = |name: &str, was: String, is: String| {
        if was != is {
            changed.push(format!("train.{name} {was} → {is}"));
        }
    };
    key("steps", saved.steps.to_string(), now.steps.to_string());
    key("warmup_steps", saved.warmup_steps.to_string(), now.warmup_steps.to_string());
    key("lr", saved.lr.to_string(), now.lr.to_string());
    key("min_lr_ratio", saved.min_lr_ratio.to_string(), now.min_lr_ratio.to_string());
    key("schedule", format!("{:?}", saved.schedule).to_lowercase(), format!("{:?}", now.schedule).to_lowercase());
    key("decay_fraction", saved.decay_fraction.to_string(), now.decay_fraction.to_string());
    key("schedule_steps", saved.schedule_steps.to_string(), now.schedule_steps.to_string());
    if changed.is_empty() || step == 0 {
        return None;
    }
    let s = step as usize;
    let (last, kept, next) = (lr_at(saved, s - 1), lr_at(saved, s), lr_at(now, s));
    let spans = |c: &TrainConfig| if c.schedule_steps > 0 { c.schedule_steps } else { c.steps };
    let continue_it = if spans(saved) != spans(now) && now.schedule_steps == 0 {
        format!("; to continue the checkpoint's schedule instead, add --set train.schedule_steps={}", spans(saved))
    } else {
        String::new()
    };
    Some(format!(
        "note: the learning-rate schedule changes on resume ({}): it is recomputed from step 1 over the new keys, so the learning rate goes from {last:.3e} at step {step} to {next:.3e} at step {} (the checkpoint's schedule would give {kept:.3e}){continue_it}",
        changed.join(", "),
        step + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(schedule: Schedule) -> TrainConfig {
        TrainConfig {
            steps: 100,
            warmup_steps: 10,
            lr: 1.0,
            min_lr_ratio: 0.1,
            schedule,
            decay_fraction: 0.2,
            ..Default::default()
        }
    }

    #[test]
    fn warmup_is_linear_then_cosine_reaches_the_floor() {
        let c = cfg(Schedule::Cosine);
        assert!((lr_at(&c, 0) - 0.1).abs() < 1e-12);
        assert!((lr_at(&c, 9) - 1.0).abs() < 1e-12);
        assert!((lr_at(&c, 10) - 1.0).abs() < 1e-12);
        assert!((lr_at(&c, 99) - 0.1).abs() < 1e-12);
        let mid = lr_at(&c, 10 + 89 / 2);
        assert!(mid > 0.5 && mid < 0.6, "{mid}");
        for s in 10..99 {
            assert!(lr_at(&c, s + 1) <= lr_at(&c, s));
        }
    }

    #[test]
    fn wsd_is_flat_then_decays_linearly() {
        let c = cfg(Schedule::Wsd);
        assert_eq!(lr_at(&c, 50), 1.0);
        assert_eq!(lr_at(&c, 79), 1.0);
        assert_eq!(lr_at(&c, 80), 1.0);
        assert!((lr_at(&c, 99) - 0.1).abs() < 1e-12);
        assert!(lr_at(&c, 90) < 1.0 && lr_at(&c, 90) > 0.1);
        assert_eq!(lr_at(&cfg(Schedule::Constant), 99), 1.0);
    }

    #[test]
    fn a_resume_that_changes_the_schedule_says_what_the_rate_does() {
        let saved = TrainConfig { steps: 600, warmup_steps: 60, lr: 1e-3, min_lr_ratio: 0.1, ..Default::default() };
        assert_eq!(resume_note(&saved, &saved, 600), None);
        let now = TrainConfig { steps: 1200, ..saved.clone() };
        let note = resume_note(&saved, &now, 600).unwrap();
        let (last, next) = (lr_at(&saved, 599), lr_at(&now, 600));
        assert!((last - 1e-4).abs() < 1e-12 && next > 5e-4, "the rate jumps: {last} -> {next}");
        let want = format!(
            "train.steps 600 → 1200): it is recomputed from step 1 over the new keys, so the learning rate goes from {last:.3e} at step 600 to {next:.3e} at step 601"
        );
        assert!(note.contains(&want), "{note}");
        assert!(note.contains("add --set train.schedule_steps=600"), "{note}");
        // Spanning the old total continues the decayed schedule: the floor, no jump.
        let kept = TrainConfig { schedule_steps: 600, ..now.clone() };
        assert_eq!(lr_at(&kept, 600), lr_at(&saved, 600));
        assert!((lr_at(&kept, 1199) - 1e-4).abs() < 1e-12);
        let note = resume_note(&saved, &kept, 600).unwrap();
        assert!(note.contains("train.schedule_steps 0 → 600") && !note.contains("add --set"), "{note}");
    }

    #[test]
    fn schedule_steps_sets_the_span_of_the_decay() {
        let c = TrainConfig { schedule_steps: 50, ..cfg(Schedule::Cosine) };
        assert!((lr_at(&c, 49) - 0.1).abs() < 1e-12 && (lr_at(&c, 99) - 0.1).abs() < 1e-12);
        let w = TrainConfig { schedule_steps: 50, ..cfg(Schedule::Wsd) };
        assert_eq!(lr_at(&w, 39), 1.0);
        assert!((lr_at(&w, 49) - 0.1).abs() < 1e-12 && (lr_at(&w, 80) - 0.1).abs() < 1e-12);
    }
}
