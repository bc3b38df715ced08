//! Placeholder until the binding lands.
