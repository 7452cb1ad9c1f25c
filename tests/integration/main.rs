//! The one integration-test binary: starts the real broker on `127.0.0.1:0` and drives it
//! over TCP with the fe2o3-amqp client, an independent AMQP 1.0 implementation.

mod admin_http;
mod auth;
mod batched_sends;
mod cli;
mod clock_restart;
mod cluster;
mod crash;
mod daemon;
mod durability;
mod emulator_config;
mod explorer;
mod flow_control;
mod forwarding;
mod forwarding_windows;
mod fuzz;
mod harness;
mod hostile;
mod http_guard;
mod limits;
mod lock_restart;
mod logs;
mod memory;
mod operator_cli;
mod parity;
mod process;
mod publish_windows;
mod queues;
mod raw;
mod raw_client;
mod rule_parameters;
mod runtime_changes;
mod topics;
mod transactions;
mod transports;
mod wire;
