package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[Duration]()

// badDuration finds the first duration key in raw (the file as a generic
// TOML map) whose value is not a valid duration string, walking Config's
// schema. go-toml hands a number written for a duration to UnmarshalText
// and returns its error without a position, so the key is located here.
func badDuration(raw map[string]any) (key string, msg string, found bool) {
	return walkDurations(raw, reflect.TypeFor[Config](), "")
}

func walkDurations(raw map[string]any, t reflect.Type, prefix string) (string, string, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		v, ok := raw[name]
		if !ok {
			continue
		}
		path := prefix + name
		switch {
		case f.Type == durationType:
			s, isString := v.(string)
			if !isString {
				return path, fmt.Sprintf("want a duration string such as \"2s\" or \"5m\", got %v (%T); durations need a unit", v, v), true
			}
			if _, err := time.ParseDuration(s); err != nil {
				return path, fmt.Sprintf("%v; write a duration string such as \"2s\" or \"5m\"", err), true
			}
		case f.Type.Kind() == reflect.Struct:
			if m, isMap := v.(map[string]any); isMap {
				if k, msg, bad := walkDurations(m, f.Type, path+"."); bad {
					return k, msg, true
				}
			}
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			items, isList := v.([]any)
			if !isList {
				continue
			}
			for j, it := range items {
				if m, isMap := it.(map[string]any); isMap {
					if k, msg, bad := walkDurations(m, f.Type.Elem(), fmt.Sprintf("%s[%d].", path, j)); bad {
						return k, msg, true
					}
				}
			}
		}
	}
	return "", "", false
}
