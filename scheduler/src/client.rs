//! The one HTTP client of `POST /v1/predict`, used by `duet predict` and by the pricing loop's
//! remote predictor, and of `POST /v1/observations` (`duet observe`): keep-alive, an optional
//! bearer token, refused connections and 5xx retried with back-off, a 4xx reported at once with
//! the server's field.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use duet_core::api::{
    ApiError, ObservationBatch, ObservationsAnswer, PredictRequest, PredictResponse,
    RegisteredWorkload,
};
use serde::Serialize;

/// A 4xx answer to a post: the server refused the request, naming the field to blame where it
/// says one (`pairs[3].a.workload`), so that a caller can say where that part came from.
#[derive(Debug, thiserror::Error)]
#[error("{url} answered {code}: {}", ApiError::describe(body))]
pub struct Refused {
    pub url: String,
    pub code: u16,
    /// The answer's body as it came.
    pub body: String,
}

impl Refused {
    /// The field the server blamed, if its answer is an [`ApiError`] that names one.
    pub fn field(&self) -> Option<String> {
        serde_json::from_str::<ApiError>(&self.body)
            .ok()
            .and_then(|e| e.field)
    }
}

/// A client of one server's `/v1/predict`.
#[derive(Debug, Clone)]
pub struct PredictClient {
    url: String,
    observations_url: String,
    workloads_url: String,
    models_url: String,
    agent: ureq::Agent,
    token: Option<String>,
    attempts: u32,
    first_backoff: Duration,
}

impl PredictClient {
    /// A client of the server at `base` (`http://host:port`); one attempt per call.
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> PredictClient {
        PredictClient {
            url: format!("{}/v1/predict", base.trim_end_matches('/')),
            observations_url: format!("{}/v1/observations", base.trim_end_matches('/')),
            workloads_url: format!("{}/v1/workloads", base.trim_end_matches('/')),
            models_url: format!("{}/v1/models", base.trim_end_matches('/')),
            agent: ureq::AgentBuilder::new().timeout(timeout).build(),
            token,
            attempts: 1,
            first_backoff: Duration::from_millis(100),
        }
    }

    /// Changes the retry policy: `attempts` tries, waiting `first_backoff`, then twice that ...
    #[must_use]
    pub fn with_retries(mut self, attempts: u32, first_backoff: Duration) -> PredictClient {
        self.attempts = attempts.max(1);
        self.first_backoff = first_backoff;
        self
    }

    /// The full URL it posts to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One prediction request; its answer, or an error naming the URL (and the server's field
    /// for a 4xx).
    pub fn predict(&self, body: &PredictRequest) -> Result<PredictResponse> {
        let text = self.post(&self.url, body, false)?;
        serde_json::from_str(&text).with_context(|| format!("{}: unexpected answer", self.url))
    }

    /// One batch of observations; the server's account of each (a 422 lists the refused ones
    /// and is an answer, not an error: the others were stored). A retried batch stores nothing
    /// twice, so a 5xx or a lost connection is retried like a prediction.
    pub fn observe(&self, batch: &ObservationBatch) -> Result<ObservationsAnswer> {
        let url = &self.observations_url;
        let text = self.post(url, batch, true)?;
        match serde_json::from_str(&text) {
            Ok(answer) => Ok(answer),
            // A 422 about the request as a whole (no observations, say) is an error body.
            Err(_) => bail!("{url} answered 422: {}", ApiError::describe(&text)),
        }
    }

    /// Every registered workload with its profiles (`GET /v1/workloads`), one attempt: what the
    /// server can predict for by id.
    pub fn workloads(&self) -> Result<Vec<RegisteredWorkload>> {
        self.get(&self.workloads_url)
    }

    /// The serving model's `model.json` (`GET /v1/models`), one attempt.
    pub fn model_meta(&self) -> Result<serde_json::Value> {
        let mut models: Vec<serde_json::Value> = self.get(&self.models_url)?;
        if models.is_empty() {
            bail!("{}: no model", self.models_url);
        }
        Ok(models.swap_remove(0)["meta"].take())
    }

    fn get<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T> {
        let mut call = self.agent.get(url);
        if let Some(token) = &self.token {
            call = call.set("Authorization", &format!("Bearer {token}"));
        }
        match call.call() {
            Ok(response) => {
                let text = response
                    .into_string()
                    .with_context(|| format!("{url}: cannot read the answer"))?;
                serde_json::from_str(&text).with_context(|| format!("{url}: unexpected answer"))
            }
            Err(ureq::Error::Status(code, response)) => {
                let message = ApiError::describe(&response.into_string().unwrap_or_default());
                bail!("{url} answered {code}: {message}")
            }
            Err(e) => bail!("{url}: {e}"),
        }
    }

    /// Posts `body` as JSON with the retry policy; the answer's text (a 422's too where
    /// `partial` says it carries an answer).
    fn post(&self, url: &str, body: &impl Serialize, partial: bool) -> Result<String> {
        let mut wait = self.first_backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            let mut call = self.agent.post(url);
            if let Some(token) = &self.token {
                call = call.set("Authorization", &format!("Bearer {token}"));
            }
            match call.send_json(body) {
                Ok(response) => {
                    return response
                        .into_string()
                        .with_context(|| format!("{url}: cannot read the answer"));
                }
                Err(ureq::Error::Status(422, response)) if partial => {
                    return response
                        .into_string()
                        .with_context(|| format!("{url}: cannot read the answer"));
                }
                Err(ureq::Error::Status(code, response)) if code < 500 => {
                    return Err(Refused {
                        url: url.to_string(),
                        code,
                        body: response.into_string().unwrap_or_default(),
                    }
                    .into());
                }
                Err(ureq::Error::Status(code, response)) => {
                    last = format!(
                        "answered {code}: {}",
                        ApiError::describe(&response.into_string().unwrap_or_default())
                    );
                }
                Err(e) => last = e.to_string(),
            }
            if attempt < self.attempts {
                std::thread::sleep(wait);
                wait *= 2;
            }
        }
        if self.attempts == 1 {
            bail!("{url}: {last}")
        }
        bail!("{url} unreachable after {} attempts: {last}", self.attempts)
    }
}
