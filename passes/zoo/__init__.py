"""Model zoo: benchmark graphs built directly in Relay."""
