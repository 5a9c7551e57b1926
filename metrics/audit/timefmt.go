package audit

import "time"

// tsLayout is how ts and started are written (SPEC §7.5): RFC 3339 in UTC
// with milliseconds (truncated, as time.Format truncates).
const tsLayout = "2006-01-02T15:04:05.000Z07:00"

// Seconds from the Unix epoch to 0000-01-01 and to 10000-01-01 (UTC): the
// years appendTime writes itself; outside them time.Format writes the year.
const (
	minFastUnix = -62167219200
	maxFastUnix = 253402300800
)

// appendTime appends t as tsLayout formats it in UTC. It is hand-written
// because the writer goroutine formats two times per line and
// time.AppendFormat re-parses the layout each time; the equivalence with
// time.Format is tested and fuzzed (timefmt_test.go).
func appendTime(dst []byte, t time.Time) []byte {
	secs := t.Unix()
	if secs < minFastUnix || secs >= maxFastUnix {
		return t.UTC().AppendFormat(dst, tsLayout)
	}
	days := secs / 86400
	sod := secs - days*86400
	if sod < 0 { // floor division for times before 1970
		days--
		sod += 86400
	}
	year, month, day := civilDate(days)
	hh, mm, ss := sod/3600, sod/60%60, sod%60
	ms := t.Nanosecond() / 1e6
	return append(dst,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+month/10), byte('0'+month%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hh/10), byte('0'+hh%10), ':',
		byte('0'+mm/10), byte('0'+mm%10), ':',
		byte('0'+ss/10), byte('0'+ss%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// civilDate is the proleptic Gregorian date of days since 1970-01-01
// (H. Hinnant's civil_from_days; the era is floored so that days before
// 0000-03-01 work too).
func civilDate(days int64) (year, month, day int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 {
		era = (z - 146096) / 146097
	}
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11], March first
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	if mp >= 10 {
		month = mp - 9
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}
