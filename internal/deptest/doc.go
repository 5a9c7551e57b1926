// Package deptest checks the architecture (docs/ARCHITECTURE.md) against
// the code: the import layers and the decision pipeline's stage list. It
// holds tests only; it must never be imported.
package deptest
