//! Text sparklines: a series squeezed into a given number of cells, one block character each.

const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `values` (each in 0..=1) as at most `width` cells, newest on the right. When there are more
/// values than cells, each cell shows the mean of its share.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let cells = values.len().min(width);
    (0..cells)
        .map(|i| {
            let (start, end) =
                (i * values.len() / cells, ((i + 1) * values.len() / cells).max(i * values.len() / cells + 1));
            let mean = values[start..end].iter().sum::<f64>() / (end - start) as f64;
            LEVELS[((mean.clamp(0.0, 1.0) * (LEVELS.len() - 1) as f64).round()) as usize]
        })
        .collect()
}

/// Accept flags (1 = accepted) as a sparkline.
pub fn accepts(recent: &[u8], width: usize) -> String {
    let values: Vec<f64> = recent.iter().map(|&a| f64::from(a)).collect();
    sparkline(&values, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeezes_by_averaging() {
        assert_eq!(accepts(&[0, 1, 1, 0], 4), "▁██▁");
        assert_eq!(accepts(&[1, 1, 0, 0], 2), "█▁");
        assert_eq!(accepts(&[1, 0], 1), "▅");
    }
}
