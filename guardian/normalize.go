package guardian

import (
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// Views are the normalised forms of one text that the pre-screen matches.
//
//   - Plain: NFKC, lower case, diacritics removed, invisible characters
//     dropped (zero-width, bidi controls, variation selectors), Unicode tag
//     characters turned back into the ASCII they hide; punctuation kept.
//   - Spaced: Plain with every run of non-letters/non-digits replaced by one
//     space ("ignore_previous-instructions" → "ignore previous instructions").
//   - Folded: Spaced with Latin look-alikes from other scripts (Cyrillic,
//     Greek, Armenian, …) replaced by the Latin letter they imitate.
//   - Squashed: Folded with common digit/symbol substitutions undone
//     (0→o, 1→i, 3→e, 4→a, 5→s, 7→t, @→a, $→s) and everything but letters
//     removed, so spaced-out or dotted letters ("i g n o r e") join up.
type Views struct {
	Plain, Spaced, Folded, Squashed string
}

// maxNormalizeBytes bounds one text's normalisation (fields are capped
// well below this before screening).
const maxNormalizeBytes = 64 << 10

// Normalize computes the views of s.
func Normalize(s string) Views {
	if len(s) > maxNormalizeBytes {
		s = s[:maxNormalizeBytes]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, " ")
	}
	// Tag characters (U+E0020–E007E) are invisible copies of ASCII that
	// models still read: turn them back into ASCII. Drop other invisibles.
	s = strings.Map(func(r rune) rune {
		if r >= 0xE0020 && r <= 0xE007E {
			return r - 0xE0000
		}
		if dropInvisible(r) {
			return -1
		}
		return r
	}, s)
	s = norm.NFKC.String(s)
	s = norm.NFD.String(strings.ToLower(s))
	s = strings.Map(func(r rune) rune {
		if isDiacritic(r) || dropInvisible(r) {
			return -1
		}
		return r
	}, s)
	plain := norm.NFC.String(s)
	spaced := spaceOut(plain)
	folded := spaceOut(strings.Map(foldConfusable, plain))
	squashed := strings.Map(func(r rune) rune {
		if l, ok := leet[r]; ok {
			return l
		}
		if unicode.IsLetter(r) {
			return r
		}
		return -1
	}, strings.Map(foldConfusable, plain))
	return Views{Plain: plain, Spaced: spaced, Folded: folded, Squashed: squashed}
}

// dropInvisible reports characters removed before matching: format
// characters (zero-width space/joiners, word joiner, BOM, bidi controls,
// soft hyphen), variation selectors, and the Hangul/Khmer fillers that
// render as nothing.
func dropInvisible(r rune) bool {
	if r < 0x80 {
		return false
	}
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x17B4, 0x17B5, 0x034F:
		return true
	}
	return unicode.In(r, unicode.Cf, unicode.Variation_Selector)
}

// isDiacritic reports the combining marks removed after decomposition
// (accents on Latin, Greek and Cyrillic letters). Marks of scripts where they
// carry meaning (Japanese dakuten, Indic vowel signs) are kept.
func isDiacritic(r rune) bool {
	return (r >= 0x0300 && r <= 0x036F) || (r >= 0x1AB0 && r <= 0x1AFF) || (r >= 0x1DC0 && r <= 0x1DFF) ||
		(r >= 0x20D0 && r <= 0x20FF) || (r >= 0xFE20 && r <= 0xFE2F)
}

// spaceOut replaces every run of characters that are neither letters, digits
// nor combining marks with one space, and trims.
func spaceOut(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := true // suppress a leading space
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) {
			b.WriteRune(r)
			space = false
			continue
		}
		if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// leet undoes the usual digit and symbol stand-ins for letters.
var leet = map[rune]rune{'0': 'o', '1': 'i', '3': 'e', '4': 'a', '5': 's', '7': 't', '@': 'a', '$': 's', '!': 'i', '|': 'l'}

// confusables maps lower-case letters of other scripts that look like Latin
// letters (and a few Latin variants NFKC keeps) to the Latin letter.
var confusables = map[rune]rune{
	// Cyrillic
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't',
	'у': 'y', 'х': 'x', 'і': 'i', 'ї': 'i', 'ј': 'j', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'һ': 'h', 'ӏ': 'l',
	'ь': 'b', 'г': 'r', 'п': 'n', 'ո': 'n', 'ѵ': 'v', 'ӓ': 'a', 'ӧ': 'o', 'ӱ': 'y', 'ԑ': 'e', 'ɡ': 'g',
	// Greek
	'α': 'a', 'β': 'b', 'γ': 'y', 'δ': 'd', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p',
	'τ': 't', 'υ': 'u', 'χ': 'x', 'ω': 'w', 'ϲ': 'c', 'ϳ': 'j', 'ς': 'c',
	// Armenian
	'օ': 'o', 'ս': 'u', 'հ': 'h', 'ց': 'g', 'ք': 'p', 'զ': 'z', 'ա': 'w',
	// Latin variants and IPA letters
	'ı': 'i', 'ȷ': 'j', 'ɑ': 'a', 'ɩ': 'i', 'ʟ': 'l', 'ɴ': 'n', 'ʀ': 'r', 'ꜱ': 's', 'ᴀ': 'a', 'ᴄ': 'c', 'ᴅ': 'd',
	'ᴇ': 'e', 'ɢ': 'g', 'ʜ': 'h', 'ɪ': 'i', 'ᴊ': 'j', 'ᴋ': 'k', 'ᴍ': 'm', 'ᴏ': 'o', 'ᴘ': 'p', 'ᴛ': 't', 'ᴜ': 'u',
	'ᴠ': 'v', 'ᴡ': 'w', 'ʏ': 'y', 'ᴢ': 'z', 'ł': 'l', 'ø': 'o', 'đ': 'd', 'ħ': 'h',
}

func foldConfusable(r rune) rune {
	if l, ok := confusables[r]; ok {
		return l
	}
	return r
}

// Decoders: text hidden in an encoding is decoded and screened as well.
var (
	base64Run  = regexp.MustCompile(`[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9_-]{16,}={0,2}`)
	hexRun     = regexp.MustCompile(`(?:[0-9A-Fa-f]{2}){8,}`)
	percentRun = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)
	escapeRun  = regexp.MustCompile(`\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}`)
)

// maxDecoded bounds the decoded texts derived from one field.
const maxDecoded = 32

// decodings returns readable texts hidden in s: base64 and hex runs that
// decode to mostly printable UTF-8, percent-encoding, \u and \x escapes,
// and punycode (xn--) labels of a host name. s itself is not included.
func decodings(s string) []string {
	var out []string
	add := func(d string) {
		if len(out) < maxDecoded && d != "" && d != s && readable(d) {
			out = append(out, d)
		}
	}
	for _, m := range base64Run.FindAllString(s, maxDecoded) {
		// A run may start with path text ("/work/SGVsbG8…"): try the run
		// and its pieces between '/' and '+' too.
		cands := []string{m}
		if strings.ContainsAny(m, "/+") {
			for _, p := range strings.FieldsFunc(m, func(r rune) bool { return r == '/' || r == '+' }) {
				if len(p) >= 16 {
					cands = append(cands, p)
				}
			}
		}
		for _, c := range cands {
			t := strings.TrimRight(c, "=")
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				if b, err := enc.DecodeString(t); err == nil && readable(string(b)) {
					add(string(b))
					break
				}
			}
		}
	}
	for _, m := range hexRun.FindAllString(s, maxDecoded) {
		if b, err := hex.DecodeString(m); err == nil {
			add(string(b))
		}
	}
	if percentRun.MatchString(s) {
		add(percentRun.ReplaceAllStringFunc(s, func(m string) string {
			b, _ := hex.DecodeString(m[1:])
			return string(b)
		}))
	}
	if escapeRun.MatchString(s) {
		add(escapeRun.ReplaceAllStringFunc(s, func(m string) string {
			b, err := hex.DecodeString(m[2:])
			if err != nil {
				return m
			}
			if len(b) == 1 {
				return string(rune(b[0]))
			}
			return string(rune(int(b[0])<<8 | int(b[1])))
		}))
	}
	if strings.Contains(strings.ToLower(s), "xn--") {
		var parts []string
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == ':' || r == '@' || r == ' ' }) {
			if u, err := idna.Punycode.ToUnicode(strings.ToLower(f)); err == nil {
				parts = append(parts, u)
			}
		}
		add(strings.Join(parts, " "))
	}
	return out
}

// readable reports valid UTF-8 whose runes are at least 85% printable or
// space (so random bytes from a hash or a key are not screened as text).
func readable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	n, ok := 0, 0
	for _, r := range s {
		n++
		if unicode.IsPrint(r) || unicode.IsSpace(r) || (r >= 0xE0020 && r <= 0xE007E) || unicode.Is(unicode.Cf, r) {
			ok++
		}
	}
	return n > 0 && ok*100 >= n*85
}
