//! The one median convention every measurement here reports.

/// The median of timings (the upper one of an even count), as every benchmark here reports.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
