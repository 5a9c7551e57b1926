package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// Default limits of `execwrap run` (docs/sandbox.md): generous for builds
// and tests, small enough that one command cannot take the machine down.
const (
	DefaultLimitMemory = "50%" // of the host's RAM
	DefaultLimitPids   = 4096
	DefaultLimitTmpfs  = "1G" // each of /tmp, /run, /dev/shm
)

// ParseByteSize parses a size flag: a number of bytes with an optional
// K/M/G/T suffix (powers of 1024, an optional trailing "B" or "iB"), "0"
// for no limit, or N% of total (the host's RAM). flag names the flag in the
// error.
func ParseByteSize(flag, s string, total int64) (int64, error) {
	v := strings.TrimSpace(s)
	if v == "" {
		return 0, fmt.Errorf("%s: empty size", flag)
	}
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.ParseFloat(pct, 64)
		if err != nil || n <= 0 || n > 100 {
			return 0, fmt.Errorf("%s %q: want a percentage in (0, 100]", flag, s)
		}
		if total <= 0 {
			return 0, fmt.Errorf("%s %q: the host's total memory is unknown; give a size", flag, s)
		}
		return int64(float64(total) * n / 100), nil
	}
	up := strings.ToUpper(v)
	up = strings.TrimSuffix(strings.TrimSuffix(up, "IB"), "B")
	mult := int64(1)
	if up != "" {
		switch up[len(up)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			up = up[:len(up)-1]
		}
	}
	n, err := strconv.ParseInt(up, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q: want bytes with an optional K, M, G or T suffix, N%%, or 0 for no limit", flag, s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%s %q: too large", flag, s)
	}
	return n * mult, nil
}
