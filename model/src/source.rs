//! Where the encoder reads a job's features: the model's own job features (`JobFeatures`), or
//! a client's features as the request carries them.

use std::collections::BTreeMap;

use duet_core::dataset::FeatureValue;

/// Where the encoder reads a job's features by name: a number (`None`: missing, or not a
/// number), a category (`None`: missing, or not a category).
pub trait FeatureSource {
    fn number(&self, name: &str) -> Option<f64>;
    fn category(&self, name: &str) -> Option<&str>;
}

impl FeatureSource for BTreeMap<String, FeatureValue> {
    fn number(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(FeatureValue::as_number)
    }

    fn category(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(FeatureValue::as_category)
    }
}

/// A client's features as sent (`LoadedModel::check_features` checks them first), read without
/// copying them into a job's features.
impl FeatureSource for duet_core::api::Features {
    fn number(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(duet_core::api::FeatureInput::Number(v)) => Some(*v),
            _ => None,
        }
    }

    fn category(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(duet_core::api::FeatureInput::Text(v)) => Some(v.as_str()),
            _ => None,
        }
    }
}
