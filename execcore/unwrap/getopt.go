package unwrap

import "strings"

// argKind is whether an option takes a value.
type argKind int

const (
	noArg argKind = iota
	reqArg
	optArg // only attached: `-xVAL` or `--name=VAL`
)

// optSpec is one program's option grammar, as GNU getopt_long reads it.
type optSpec struct {
	// short is a getopt optstring without the leading '+' ("k:s:fpv",
	// "::" for an optional value).
	short string
	long  map[string]argKind
	// permute: options may follow operands (GNU default, without '+');
	// otherwise parsing stops at the first operand.
	permute bool
	// expand, when set, may replace an option by words that are then
	// read in its place (env -S); words == nil with handled means the
	// value could not be split (the parse fails).
	expand func(name, val string) (words []string, handled bool)
}

// maxExpansions bounds nested env -S splitting.
const maxExpansions = 16

// opt is one parsed option: its short letter or long name, and its value.
type opt struct {
	name  string
	value string
}

// parse reads args as GNU getopt_long would. ok is false on anything it
// does not know (an unknown option, an ambiguous abbreviation, a missing
// value): the caller must then fail closed.
func (s optSpec) parse(args []string) (opts []opt, operands []string, ok bool) {
	expansions := 0
	// insert puts an option's expansion after position i.
	insert := func(i int, o opt) bool {
		if s.expand == nil {
			return true
		}
		words, handled := s.expand(o.name, o.value)
		if !handled {
			return true
		}
		expansions++
		if words == nil || expansions > maxExpansions {
			return false
		}
		rest := append(append([]string(nil), words...), args[i+1:]...)
		args = append(args[:i+1:i+1], rest...)
		return true
	}
	i := 0
	// add records an option, taking its value from the next argument
	// when it needs one, and splices in an expansion.
	add := func(o opt, takeNext bool) bool {
		if takeNext {
			if i+1 >= len(args) {
				return false
			}
			i++
			o.value = args[i]
		}
		opts = append(opts, o)
		return insert(i, o)
	}
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(operands, args[i+1:]...), true
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			full, kind, found := s.longOpt(name)
			if !found || (kind == noArg && hasVal) || !add(opt{name: full, value: val}, kind == reqArg && !hasVal) {
				return nil, nil, false
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				kind, found := s.shortOpt(a[j])
				if !found {
					return nil, nil, false
				}
				if kind == noArg {
					opts = append(opts, opt{name: a[j : j+1]})
					continue
				}
				if !add(opt{name: a[j : j+1], value: a[j+1:]}, kind == reqArg && j+1 == len(a)) {
					return nil, nil, false
				}
				break
			}
		default:
			if !s.permute {
				return opts, append(operands, args[i:]...), true
			}
			operands = append(operands, a)
		}
	}
	return opts, operands, true
}

func (s optSpec) shortOpt(c byte) (argKind, bool) {
	if c == ':' || c == '+' {
		return 0, false
	}
	i := strings.IndexByte(s.short, c)
	if i < 0 {
		return 0, false
	}
	switch {
	case strings.HasPrefix(s.short[i+1:], "::"):
		return optArg, true
	case strings.HasPrefix(s.short[i+1:], ":"):
		return reqArg, true
	}
	return noArg, true
}

// longOpt resolves a long option or a unique abbreviation of one.
func (s optSpec) longOpt(name string) (string, argKind, bool) {
	if name == "" {
		return "", 0, false
	}
	if k, ok := s.long[name]; ok {
		return name, k, true
	}
	found := ""
	for n := range s.long {
		if strings.HasPrefix(n, name) {
			if found != "" {
				return "", 0, false
			}
			found = n
		}
	}
	if found == "" {
		return "", 0, false
	}
	return found, s.long[found], true
}

// has reports whether any parsed option is one of names.
func has(opts []opt, names ...string) bool {
	for _, o := range opts {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}

// value returns the value of the last option among names.
func value(opts []opt, names ...string) (string, bool) {
	v, ok := "", false
	for _, o := range opts {
		for _, n := range names {
			if o.name == n {
				v, ok = o.value, true
			}
		}
	}
	return v, ok
}
