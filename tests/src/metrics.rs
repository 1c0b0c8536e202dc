//! Reading relayd's `/metrics` (Prometheus text format) in assertions.

/// The sum of the samples of `name` whose labels include every pair of `labels`.
///
/// Only plain sample lines are read (`name{a="b",…} value`); comments and other metrics
/// are skipped. Label values here never contain `,` or `"`, which keeps the parsing simple.
pub fn sample_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((metric, rest)) => (metric, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let present: Vec<(&str, &str)> = label_text
                .split(',')
                .filter(|pair| !pair.is_empty())
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    Some((key, value.trim_matches('"')))
                })
                .collect();
            labels
                .iter()
                .all(|wanted| present.contains(wanted))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

#[cfg(test)]
mod tests;
