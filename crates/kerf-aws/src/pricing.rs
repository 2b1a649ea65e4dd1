//! On-demand prices from the AWS Price List API (`pricing:GetProducts`, asked in us-east-1 for
//! any region): the hourly USD price of Linux, shared-tenancy, no-preinstalled-software
//! instances per type. Each product comes as a JSON document of its own; one that cannot be
//! read is skipped. When the API cannot be asked, the built-in table prices instead
//! ([`crate::instance_types::on_demand_price`]).

use std::collections::BTreeMap;

use aws_sdk_pricing::types::{Filter, FilterType};
use serde_json::Value;

use crate::AwsClients;
use crate::error::AwsError;

/// On-demand $/h per instance type of one region.
pub type OnDemandPrices = BTreeMap<String, f64>;

const OPERATION: &str = "pricing:GetProducts";

/// The (attribute, value) pairs a product must match: the prices kerf's nodes pay.
fn filters(region: &str) -> [(&'static str, String); 6] {
    [
        ("regionCode", region.to_string()),
        ("productFamily", "Compute Instance".to_string()),
        ("operatingSystem", "Linux".to_string()),
        ("tenancy", "Shared".to_string()),
        ("preInstalledSw", "NA".to_string()),
        ("capacitystatus", "Used".to_string()),
    ]
}

/// The instance type and hourly USD on-demand price of one price-list document; `None` for a
/// product with no hourly USD on-demand price above zero (e.g. a type not sold on demand).
pub fn parse_product(document: &str) -> Result<Option<(String, f64)>, String> {
    let doc: Value = serde_json::from_str(document).map_err(|e| format!("not JSON: {e}"))?;
    let instance_type = doc
        .pointer("/product/attributes/instanceType")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("product.attributes.instanceType is missing")?;
    let Some(terms) = doc.pointer("/terms/OnDemand").and_then(Value::as_object) else { return Ok(None) };
    let dimensions = terms
        .values()
        .filter_map(|term| term.get("priceDimensions").and_then(Value::as_object))
        .flat_map(|d| d.values());
    for dimension in dimensions {
        if dimension.get("unit").and_then(Value::as_str) != Some("Hrs") {
            continue;
        }
        let Some(usd) = dimension.pointer("/pricePerUnit/USD").and_then(Value::as_str) else { continue };
        let price: f64 =
            usd.parse().map_err(|_| format!("{instance_type}: terms.OnDemand price {usd:?} is not a number"))?;
        if price.is_finite() && price > 0.0 {
            return Ok(Some((instance_type.to_string(), price)));
        }
    }
    Ok(None)
}

/// The region's on-demand prices from the Price List API. An answer without a single price is
/// an error (the caller falls back to the built-in table).
pub async fn on_demand_prices(clients: &AwsClients, region: &str) -> Result<OnDemandPrices, AwsError> {
    let mut filter_list = Vec::new();
    for (field, value) in filters(region) {
        let f = Filter::builder()
            .r#type(FilterType::TermMatch)
            .field(field)
            .value(value)
            .build()
            .map_err(|e| AwsError::new(OPERATION, e.to_string()))?;
        filter_list.push(f);
    }
    let mut prices = OnDemandPrices::new();
    let mut skipped = 0usize;
    let mut token = None;
    loop {
        let page = clients
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .format_version("aws_v1")
            .set_filters(Some(filter_list.clone()))
            .max_results(100)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(OPERATION, e))?;
        for document in page.price_list() {
            match parse_product(document) {
                Ok(Some((instance_type, price))) => {
                    let p = prices.entry(instance_type).or_insert(price);
                    *p = p.min(price);
                }
                Ok(None) => {}
                Err(e) => {
                    skipped += 1;
                    tracing::debug!(error = %e, "skipping a price-list product");
                }
            }
        }
        token = page.next_token().map(str::to_string).filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    if skipped > 0 {
        tracing::warn!(skipped, region, "price-list products that could not be read");
    }
    if prices.is_empty() {
        return Err(AwsError::new(OPERATION, format!("no on-demand Linux prices for region {region}")));
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One product as GetProducts returns it (format `aws_v1`): the product with its
    /// attributes, and its terms keyed by offer and rate codes.
    const M5_LARGE: &str = r#"{
      "product": {
        "productFamily": "Compute Instance",
        "attributes": {
          "instanceType": "m5.large", "regionCode": "us-west-2", "operatingSystem": "Linux",
          "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used", "vcpu": "2", "memory": "8 GiB"
        },
        "sku": "K5PRODUCT"
      },
      "serviceCode": "AmazonEC2",
      "terms": {
        "OnDemand": {
          "K5PRODUCT.JRTCKXETXF": {
            "priceDimensions": {
              "K5PRODUCT.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "beginRange": "0", "endRange": "Inf", "appliesTo": [],
                "description": "$0.096 per On Demand Linux m5.large Instance Hour",
                "rateCode": "K5PRODUCT.JRTCKXETXF.6YS6EN2CT7",
                "pricePerUnit": {"USD": "0.0960000000"}
              }
            },
            "sku": "K5PRODUCT", "effectiveDate": "2025-06-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "termAttributes": {}
          }
        },
        "Reserved": {
          "K5PRODUCT.4NA7Y494T4": {
            "priceDimensions": {
              "K5PRODUCT.4NA7Y494T4.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.0600000000"}}
            }
          }
        }
      },
      "version": "20250601000000",
      "publicationDate": "2025-06-01T00:00:00Z"
    }"#;

    #[test]
    fn a_price_list_product_gives_its_type_and_hourly_on_demand_usd_price() {
        assert_eq!(parse_product(M5_LARGE), Ok(Some(("m5.large".to_string(), 0.096))));
    }

    #[test]
    fn products_without_an_hourly_on_demand_price_give_none() {
        let reserved_only = M5_LARGE.replace("\"OnDemand\"", "\"Other\"");
        assert_eq!(parse_product(&reserved_only), Ok(None));
        let free = M5_LARGE.replace("0.0960000000", "0.0000000000");
        assert_eq!(parse_product(&free), Ok(None));
        let per_quantity =
            M5_LARGE.replace("\"unit\": \"Hrs\", \"beginRange\"", "\"unit\": \"Quantity\", \"beginRange\"");
        assert_eq!(parse_product(&per_quantity), Ok(None));
    }

    #[test]
    fn unreadable_products_are_errors_saying_what_is_wrong() {
        assert!(parse_product("{").is_err_and(|e| e.starts_with("not JSON")));
        let untyped = M5_LARGE.replace("\"instanceType\": \"m5.large\", ", "");
        assert_eq!(parse_product(&untyped), Err("product.attributes.instanceType is missing".to_string()));
        let garbled = M5_LARGE.replace("0.0960000000", "cheap");
        assert_eq!(
            parse_product(&garbled),
            Err("m5.large: terms.OnDemand price \"cheap\" is not a number".to_string())
        );
    }
}
