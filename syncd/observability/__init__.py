"""What the daemon tells its operators: logs with secrets redacted
(:mod:`~syncd.observability.logs`) and Prometheus metrics (:mod:`~syncd.observability.metrics`)."""
