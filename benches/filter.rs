//! Evaluation throughput of a five-clause SQL filter and of a correlation filter.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrobus::broker::filter::{
    CorrelationFilter, FilterMessage, FilterValue, FilterValueRef, SqlFilter, SystemProperty,
    property_names_equal,
};

/// A message shaped like the broker's: a few system properties and a small property list.
struct BenchMessage {
    label: String,
    correlation_id: String,
    properties: Vec<(String, FilterValue)>,
}

impl FilterMessage for BenchMessage {
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>> {
        match property {
            SystemProperty::Label => Some(FilterValueRef::String(&self.label)),
            SystemProperty::CorrelationId => Some(FilterValueRef::String(&self.correlation_id)),
            SystemProperty::SequenceNumber => Some(FilterValueRef::Integer(42)),
            _ => None,
        }
    }

    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>> {
        self.properties
            .iter()
            .find(|(candidate, _)| property_names_equal(candidate, name))
            .map(|(_, value)| value.as_value_ref())
    }
}

fn message() -> BenchMessage {
    BenchMessage {
        label: "orders/eu/priority".to_owned(),
        correlation_id: "high".to_owned(),
        properties: vec![
            ("color".to_owned(), FilterValue::from("red")),
            ("quantity".to_owned(), FilterValue::Integer(10)),
            ("price".to_owned(), FilterValue::Float(12.5)),
            ("region".to_owned(), FilterValue::from("eu-west")),
            ("express".to_owned(), FilterValue::Bool(true)),
        ],
    }
}

fn evaluation(criterion: &mut Criterion) {
    let message = message();
    let sql = SqlFilter::parse(
        "color = 'red' AND quantity * 2 >= 20 AND price < 100.0 \
         AND region IN ('eu-west', 'eu-north') AND sys.Label LIKE 'orders/%'",
    );
    let Ok(sql) = sql else {
        panic!("benchmark filter does not parse: {sql:?}");
    };
    assert_eq!(sql.evaluate(&message), Ok(true));
    let correlation = CorrelationFilter {
        correlation_id: Some("high".to_owned()),
        label: Some("orders/eu/priority".to_owned()),
        properties: vec![
            ("color".to_owned(), FilterValue::from("red")),
            ("quantity".to_owned(), FilterValue::Integer(10)),
        ],
        ..CorrelationFilter::default()
    };
    assert!(correlation.matches(&message));

    let mut group = criterion.benchmark_group("filter");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sql_five_clauses", |bencher| {
        bencher.iter(|| black_box(&sql).evaluate(black_box(&message)))
    });
    group.bench_function("correlation", |bencher| {
        bencher.iter(|| black_box(&correlation).matches(black_box(&message)))
    });
    group.bench_function("sql_parse_five_clauses", |bencher| {
        bencher.iter(|| SqlFilter::parse(black_box(sql.expression())))
    });
    group.finish();
}

criterion_group!(benches, evaluation);
criterion_main!(benches);
