//! Subnets and security groups from a node class's selector terms. Terms are alternatives (a
//! subnet matching any term is selected); within a term every field must match.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use kerf_api::ec2nodeclass::{SecurityGroupSelectorTerm, SecurityGroupStatus, SubnetSelectorTerm, SubnetStatus};

use crate::AwsClients;
use crate::error::AwsError;

/// A selected subnet with what launching needs from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub available_ips: i64,
}

impl Subnet {
    pub fn status(&self) -> SubnetStatus {
        SubnetStatus { id: self.id.clone(), zone: self.zone.clone(), zone_id: self.zone_id.clone() }
    }
}

/// EC2 filters for tag selectors: `"*"` matches any value (the key must exist).
pub fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

/// Every object a paged Describe call selects for any of `terms` (each term's filters from
/// `filters`; a term with none selects nothing), by ID. `page` asks for one page: the objects on
/// it (ID and value) and the token of the next.
async fn select_all<Term, T, Fut>(
    terms: &[Term],
    filters: impl Fn(&Term) -> Vec<Filter>,
    page: impl Fn(Vec<Filter>, Option<String>) -> Fut,
) -> Result<BTreeMap<String, T>, AwsError>
where
    Fut: Future<Output = Result<(Vec<(String, T)>, Option<String>), AwsError>>,
{
    let mut found = BTreeMap::new();
    for term in terms {
        let filters = filters(term);
        if filters.is_empty() {
            continue;
        }
        let mut token = None;
        loop {
            let (items, next) = page(filters.clone(), token).await?;
            found.extend(items);
            token = next;
            if token.is_none() {
                break;
            }
        }
    }
    Ok(found)
}

/// The subnets the terms select, most free addresses first (then by ID), as Karpenter orders
/// them in the node class's status.
pub async fn subnets(clients: &AwsClients, terms: &[SubnetSelectorTerm]) -> Result<Vec<Subnet>, AwsError> {
    let filters = |term: &SubnetSelectorTerm| {
        let mut filters = tag_filters(&term.tags);
        if let Some(id) = &term.id {
            filters.push(Filter::builder().name("subnet-id").values(id).build());
        }
        filters
    };
    let page = |filters: Vec<Filter>, token: Option<String>| async move {
        let out = clients
            .ec2
            .describe_subnets()
            .set_filters(Some(filters))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeSubnets", e))?;
        let items = out
            .subnets()
            .iter()
            .filter_map(|s| {
                let (id, zone) = (s.subnet_id()?, s.availability_zone()?);
                let subnet = Subnet {
                    id: id.to_string(),
                    zone: zone.to_string(),
                    zone_id: s.availability_zone_id().map(str::to_string),
                    available_ips: i64::from(s.available_ip_address_count().unwrap_or(0)),
                };
                Some((id.to_string(), subnet))
            })
            .collect();
        Ok((items, out.next_token().map(str::to_string)))
    };
    let mut list: Vec<Subnet> = select_all(terms, filters, page).await?.into_values().collect();
    list.sort_by(|a, b| b.available_ips.cmp(&a.available_ips).then_with(|| a.id.cmp(&b.id)));
    Ok(list)
}

/// The security groups the terms select, by ID.
pub async fn security_groups(
    clients: &AwsClients,
    terms: &[SecurityGroupSelectorTerm],
) -> Result<Vec<SecurityGroupStatus>, AwsError> {
    let filters = |term: &SecurityGroupSelectorTerm| {
        let mut filters = tag_filters(&term.tags);
        if let Some(id) = &term.id {
            filters.push(Filter::builder().name("group-id").values(id).build());
        }
        if let Some(name) = &term.name {
            filters.push(Filter::builder().name("group-name").values(name).build());
        }
        filters
    };
    let page = |filters: Vec<Filter>, token: Option<String>| async move {
        let out = clients
            .ec2
            .describe_security_groups()
            .set_filters(Some(filters))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeSecurityGroups", e))?;
        let items = out
            .security_groups()
            .iter()
            .filter_map(|g| {
                let id = g.group_id()?;
                Some((
                    id.to_string(),
                    SecurityGroupStatus { id: id.to_string(), name: g.group_name().map(str::to_string) },
                ))
            })
            .collect();
        Ok((items, out.next_token().map(str::to_string)))
    };
    Ok(select_all(terms, filters, page).await?.into_values().collect())
}
