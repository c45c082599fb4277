"""TVM integration: the Relay pass, the Relay frontend/backend, tvmc, the model zoo."""
