//! ApiVersions: the advertised table from `oxbow_protocol::versions`, and the features this
//! broker supports and the cluster finalized (from v3; `Admin.describeFeatures` reads them, and
//! the Java producer uses transaction version 2 once it sees it finalized).

use oxbow_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use oxbow_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use oxbow_protocol::{ApiKey, StrBytes, versions};

use super::Ctx;

/// The features this broker supports: (name, lowest level, highest level).
const SUPPORTED_FEATURES: &[(&str, i16, i16)] = &[(oxbow_meta::controller::TRANSACTION_VERSION, 0, 2)];

pub fn ranges() -> Vec<ApiVersion> {
    versions::supported()
        .into_iter()
        .map(|r| {
            let mut v = ApiVersion::default();
            v.api_key = r.key as i16;
            v.min_version = r.min;
            v.max_version = r.max;
            v
        })
        .collect()
}

pub async fn handle(ctx: &Ctx<'_>, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = ranges();
    if !ctx.broker.groups.consumer_protocol() {
        // Clients use the consumer group protocol when they see its heartbeat.
        let hidden = [ApiKey::ConsumerGroupHeartbeat as i16, ApiKey::ConsumerGroupDescribe as i16];
        resp.api_keys.retain(|k| !hidden.contains(&k.api_key));
    }
    let image = ctx.broker.image();
    resp.supported_features = SUPPORTED_FEATURES
        .iter()
        // Before v4, features whose lowest level is 0 are left out (old clients cannot read
        // them), as Kafka does.
        .filter(|(_, min, _)| ctx.version >= 4 || *min > 0)
        .map(|(name, min, max)| {
            let mut f = SupportedFeatureKey::default();
            f.name = StrBytes::from_static_str(name);
            f.min_version = *min;
            f.max_version = *max;
            f
        })
        .collect();
    resp.finalized_features = image
        .features
        .iter()
        .filter(|(_, level)| **level != 0)
        .map(|(name, level)| {
            let mut f = FinalizedFeatureKey::default();
            f.name = StrBytes::from_string(name.clone());
            f.min_version_level = *level;
            f.max_version_level = *level;
            f
        })
        .collect();
    // Kafka's epoch is the offset of the last metadata record applied: the image's version.
    resp.finalized_features_epoch = i64::try_from(image.version).unwrap_or(i64::MAX);
    resp
}
