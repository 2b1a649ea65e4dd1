//! The one error a reconciler returns ([`ControllerError`]): what it cannot work around by
//! retrying later. The runtime logs it and backs the reconciler off.

use kerf_api::cluster::ApiError;
use kerf_cloud::CloudError;

/// A failure the controllers cannot work around by retrying later.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Cloud(#[from] CloudError),
}
