//! `ferrobus cluster status|add-node|remove-node|transfer-leader`: a cluster's membership
//! and leadership through the admin API's `/$cluster` routes (answered by the leader; any
//! node forwards them).

use serde_json::Value as Json;

use super::output::{print_json, table};
use super::{ClusterAction, Connection, OpsError, Output, Target};

/// Runs a `ferrobus cluster` command.
pub async fn cluster(action: &ClusterAction, connection: &Connection) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let answer = match action {
        ClusterAction::Status => target.admin_json("GET", "/$cluster", None).await?,
        ClusterAction::AddNode { id, address } => {
            let body = serde_json::json!({ "id": id, "address": address }).to_string();
            target
                .admin_json("POST", "/$cluster/members", Some(&body))
                .await?
        }
        ClusterAction::RemoveNode { id } => {
            target
                .admin_json("DELETE", &format!("/$cluster/members/{id}"), None)
                .await?
        }
        ClusterAction::TransferLeader { id } => {
            let body = id.map(|id| serde_json::json!({ "id": id }).to_string());
            target
                .admin_json("POST", "/$cluster/leader", body.as_deref())
                .await?
        }
    };
    let view: Json = serde_json::from_str(&answer)
        .map_err(|error| OpsError::Refused(format!("the broker answered no JSON: {error}")))?;
    if connection.output == Some(Output::Json) {
        print_json(&view);
        return Ok(());
    }
    match view["message"].as_str() {
        Some(message) => println!("{message}"),
        None => print!("{}", render(&view)),
    }
    Ok(())
}

/// The leader's view as a table: one row per node, voters and learners.
fn render(view: &Json) -> String {
    let number = |value: &Json| value.as_u64().map(|n| n.to_string());
    let leader = view["leader"].as_u64();
    let ids = |key: &str| -> Vec<u64> {
        view[key]
            .as_array()
            .map(|items| items.iter().filter_map(Json::as_u64).collect())
            .unwrap_or_default()
    };
    let progress = |id: u64| {
        view["members"].as_array().and_then(|members| {
            members
                .iter()
                .find(|member| member["id"].as_u64() == Some(id))
                .cloned()
        })
    };
    let mut rows = Vec::new();
    for (key, kind) in [("voters", "voter"), ("learners", "learner")] {
        for id in ids(key) {
            let role = if Some(id) == leader { "leader" } else { kind };
            let member = progress(id);
            let field = |name: &str| {
                member
                    .as_ref()
                    .and_then(|member| number(&member[name]))
                    .unwrap_or_else(|| "-".to_string())
            };
            rows.push(vec![
                id.to_string(),
                role.to_string(),
                field("matched"),
                field("lag"),
            ]);
        }
    }
    format!(
        "term {}, last index {}\n{}",
        number(&view["term"]).unwrap_or_else(|| "-".to_string()),
        number(&view["last_index"]).unwrap_or_else(|| "-".to_string()),
        table(&["NODE", "ROLE", "MATCHED", "LAG"], &rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_prints_one_row_per_node() {
        let view = serde_json::json!({
            "node": 1, "role": "leader", "leader": 1, "term": 3, "last_index": 42,
            "voters": [1, 2, 3], "learners": [4],
            "members": [
                {"id": 1, "matched": 42, "lag": 0},
                {"id": 2, "matched": 40, "lag": 2},
                {"id": 4, "matched": 10, "lag": 32}
            ]
        });
        let text = render(&view);
        assert!(text.starts_with("term 3, last index 42\n"), "{text}");
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(
            rows[0].split_whitespace().eq(["1", "leader", "42", "0"]),
            "{text}"
        );
        assert!(
            rows[2].split_whitespace().eq(["3", "voter", "-", "-"]),
            "{text}"
        );
        assert!(
            rows[3].split_whitespace().eq(["4", "learner", "10", "32"]),
            "{text}"
        );
    }
}
