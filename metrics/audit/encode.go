package audit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendRecord appends r as one JSON line (with its trailing newline) to dst.
// It is hand-written because the writer goroutine's throughput bounds how
// many decisions per second can be audited without drops; the key order is
// the SPEC §7.5 order. A zero Time is written as the current time; a
// non-empty TS wins over Time.
func AppendRecord(dst []byte, r Record) []byte {
	dst = appendBody(dst, &r)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, r.Seq, 10)
	dst = appendField(dst, `,"prev":"`, r.Prev)
	return append(dst, "}\n"...)
}

// appendBody appends r's line up to, not including, seq and prev (which
// the chain writes itself, chain.appendLine).
func appendBody(dst []byte, r *Record) []byte {
	ts := r.TS
	dst = append(dst, `{"ts":"`...)
	if ts != "" {
		dst = appendEscaped(dst, ts)
	} else {
		t := r.Time
		if t.IsZero() {
			t = time.Now()
		}
		dst = appendTime(dst, t)
	}
	dst = append(dst, `","started":"`...)
	if !r.Started.IsZero() {
		dst = appendTime(dst, r.Started)
	}
	dst = append(dst, '"')
	dst = appendField(dst, `,"event":"`, r.Event)
	dst = appendField(dst, `,"decision":"`, r.Decision)
	dst = appendField(dst, `,"reason":"`, r.Reason)
	dst = appendField(dst, `,"source":"`, r.Source)
	dst = appendField(dst, `,"protocol":"`, r.Protocol)
	dst = appendField(dst, `,"host":"`, r.Host)
	dst = append(dst, `,"port":`...)
	dst = strconv.AppendUint(dst, uint64(r.Port), 10)
	dst = appendField(dst, `,"method":"`, r.Method)
	dst = appendField(dst, `,"client":"`, r.Client)
	dst = appendField(dst, `,"session_id":"`, r.SessionID)
	dst = appendField(dst, `,"environment_id":"`, r.EnvironmentID)
	dst = appendField(dst, `,"execution_id":"`, r.ExecutionID)
	dst = appendField(dst, `,"pattern":"`, r.Pattern)
	dst = appendField(dst, `,"override":"`, r.Override)
	dst = appendField(dst, `,"approval_id":"`, r.ApprovalID)
	dst = appendField(dst, `,"reviewer":"`, r.Reviewer)
	dst = appendField(dst, `,"outcome":"`, r.Outcome)
	dst = appendField(dst, `,"rationale":"`, r.Rationale)
	dst = append(dst, `,"addrs":[`...)
	for i, a := range r.Addrs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		if a.Zone() == "" {
			// Digits, hex, '.' and ':' only: nothing to escape.
			dst = a.AppendTo(dst)
		} else {
			dst = appendEscaped(dst, a.String())
		}
		dst = append(dst, '"')
	}
	dst = append(dst, ']')
	dst = appendField(dst, `,"level":"`, r.Level)
	if r.Rule == nil {
		dst = append(dst, `,"rule":null`...)
	} else {
		dst = append(dst, `,"rule":`...)
		dst = strconv.AppendInt(dst, int64(*r.Rule), 10)
	}
	if r.Shadow == nil {
		dst = append(dst, `,"shadow":null`...)
	} else {
		dst = append(dst, `,"shadow":{"decision":"`...)
		dst = appendEscaped(dst, r.Shadow.Decision)
		dst = append(dst, `","reason":"`...)
		dst = appendEscaped(dst, r.Shadow.Reason)
		dst = append(dst, `","pattern":"`...)
		dst = appendEscaped(dst, r.Shadow.Pattern)
		dst = append(dst, `"}`...)
	}
	if r.End {
		dst = append(dst, `,"bytes_out":`...)
		dst = strconv.AppendInt(dst, r.BytesOut, 10)
		dst = append(dst, `,"bytes_in":`...)
		dst = strconv.AppendInt(dst, r.BytesIn, 10)
		dst = append(dst, `,"duration_ms":`...)
		dst = strconv.AppendInt(dst, r.DurationMS, 10)
	} else {
		dst = append(dst, `,"bytes_out":null,"bytes_in":null,"duration_ms":null`...)
	}
	if r.End && r.Status != 0 {
		dst = append(dst, `,"status":`...)
		dst = strconv.AppendInt(dst, int64(r.Status), 10)
	} else {
		dst = append(dst, `,"status":null`...)
	}
	return appendField(dst, `,"close":"`, r.Close)
}

// appendField appends one string field; prefix is its `,"key":"` (a
// constant at every call: one copy instead of three per field).
func appendField(dst []byte, prefix, value string) []byte {
	dst = append(dst, prefix...)
	dst = appendEscaped(dst, value)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends s escaped as the inside of a JSON string: quotes,
// backslashes and control characters escaped, U+2028/U+2029 escaped (for
// JavaScript consumers), invalid UTF-8 replaced by U+FFFD — so every line is
// valid JSON whatever bytes a field holds.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}
