//! The HTTP listener: /healthz, /readyz, /metrics and /hooks/<provider>.
