// Package configs holds netproxy's embedded default configuration file.
//
// It owns only bytes; parsing and validation live in internal/config.
package configs

import _ "embed"

// DefaultTOML is configs/default.toml: the configuration `netproxy serve`
// runs on without --config and the base every file is decoded over.
//
//go:embed default.toml
var DefaultTOML []byte
