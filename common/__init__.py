"""Code both services share: gRPC plumbing (errors → status codes, auth, TLS, health, interceptors,
metrics), logging and the serve loop."""
