//! The instance profile of a node class: the one it names (`instanceProfile`), or one kerf
//! creates for its `role`, tagged for the cluster and the node class, and deletes with it.

use kerf_api::EC2NodeClass;

use crate::AwsClients;
use crate::error::AwsError;
use crate::settings::AwsSettings;
use crate::tags;

/// The code of the error for a node class with neither `role` nor `instanceProfile`.
pub const INVALID_NODE_CLASS: &str = "InvalidNodeClass";

/// The name of the profile kerf creates for a node class's role: the cluster name and a stable
/// hash of region and node class (so that a restart finds the same profile again).
pub fn profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    let hash = kerf_cloud::aws::catalog::fnv1a64(&format!("{region}{node_class}"));
    format!("{cluster}_{hash}")
}

/// Makes sure the node class's instance profile exists and returns its name: `instanceProfile`
/// as given (it must exist), or the profile for `role`, created and tagged if missing and holding
/// exactly that role.
pub async fn ensure(
    clients: &AwsClients,
    settings: &AwsSettings,
    node_class: &EC2NodeClass,
) -> Result<String, AwsError> {
    if let Some(name) = &node_class.spec.instance_profile {
        clients
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("iam:GetInstanceProfile", e))?;
        return Ok(name.clone());
    }
    let Some(role) = &node_class.spec.role else {
        return Err(AwsError {
            operation: "iam:GetInstanceProfile",
            code: Some(INVALID_NODE_CLASS.to_string()),
            message: "spec: one of role or instanceProfile is required".to_string(),
        });
    };
    let name = profile_name(&settings.cluster_name, clients.region(), node_class.name());
    let existing = match clients.iam.get_instance_profile().instance_profile_name(&name).send().await {
        Ok(out) => out.instance_profile().cloned(),
        Err(e) => {
            let e = AwsError::from_sdk("iam:GetInstanceProfile", e);
            if !e.is_not_found() {
                return Err(e);
            }
            None
        }
    };
    let roles: Vec<String> = match &existing {
        Some(p) => p.roles().iter().map(|r| r.role_name().to_string()).collect(),
        None => {
            let mut iam_tags = Vec::new();
            for (k, v) in tags::instance_profile_tags(settings, clients.region(), node_class) {
                let tag = aws_sdk_iam::types::Tag::builder()
                    .key(k)
                    .value(v)
                    .build()
                    .map_err(|e| AwsError::new("iam:CreateInstanceProfile", e.to_string()))?;
                iam_tags.push(tag);
            }
            clients
                .iam
                .create_instance_profile()
                .instance_profile_name(&name)
                .set_tags(Some(iam_tags))
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("iam:CreateInstanceProfile", e))?;
            Vec::new()
        }
    };
    if roles.iter().any(|r| r == role) {
        return Ok(name);
    }
    // A profile holds one role: the node class's role changed, swap it.
    for old in roles {
        clients
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(&old)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("iam:RemoveRoleFromInstanceProfile", e))?;
    }
    // The role is named as in IAM (a path prefix is not part of the name).
    let role_name = role.rsplit('/').next().unwrap_or(role);
    clients
        .iam
        .add_role_to_instance_profile()
        .instance_profile_name(&name)
        .role_name(role_name)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("iam:AddRoleToInstanceProfile", e))?;
    Ok(name)
}

/// Deletes the profile kerf created for the node class's role (its roles removed first). Does
/// nothing for a node class that names its own profile, or when the profile is gone already, or
/// when the profile is not tagged as this cluster's and this node class's.
pub async fn delete(clients: &AwsClients, settings: &AwsSettings, node_class: &EC2NodeClass) -> Result<(), AwsError> {
    if node_class.spec.role.is_none() {
        return Ok(());
    }
    let name = profile_name(&settings.cluster_name, clients.region(), node_class.name());
    let profile = match clients.iam.get_instance_profile().instance_profile_name(&name).send().await {
        Ok(out) => match out.instance_profile() {
            Some(p) => p.clone(),
            None => return Ok(()),
        },
        Err(e) => {
            let e = AwsError::from_sdk("iam:GetInstanceProfile", e);
            return if e.is_not_found() { Ok(()) } else { Err(e) };
        }
    };
    let cluster_key = settings.cluster_tag_key();
    let owned = profile.tags().iter().any(|t| t.key() == cluster_key && t.value() == "owned")
        && profile
            .tags()
            .iter()
            .any(|t| t.key() == kerf_api::labels::AWS_EC2_NODE_CLASS && t.value() == node_class.name());
    if !owned {
        return Ok(());
    }
    for role in profile.roles() {
        clients
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(role.role_name())
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("iam:RemoveRoleFromInstanceProfile", e))?;
    }
    match clients.iam.delete_instance_profile().instance_profile_name(&name).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = AwsError::from_sdk("iam:DeleteInstanceProfile", e);
            if e.is_not_found() { Ok(()) } else { Err(e) }
        }
    }
}
