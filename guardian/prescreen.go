package guardian

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// RationalePromptInjection is the rationale of a pre-screen denial.
const RationalePromptInjection = "prompt_injection_suspected"

// Pre-screen results, the values of netproxy_guardian_prescreen_total{result}.
const (
	PrescreenPassed  = "passed"
	PrescreenFlagged = "flagged"
)

// PrescreenCounter counts pre-screen results (metrics.Metrics implements it).
type PrescreenCounter interface {
	GuardianPrescreen(result string)
}

// Finding says why the pre-screen flagged a request: the field (command,
// cwd, justification, …), the rule, and how the text was hidden ("" when
// it was plain; base64, hex, percent, escape or punycode when decoded).
// It never holds the matched text itself.
type Finding struct {
	Field    string
	Rule     string
	Encoding string
}

// rule is one family of reviewer-directed phrases.
type rule struct {
	id string
	// phrases match the Spaced and Folded views, padded with one space on
	// each side so " word " is a whole-word match in every script.
	phrases []*regexp.Regexp
	// plain match the Plain view (punctuation kept).
	plain []*regexp.Regexp
	// squashed are substrings of the Squashed view.
	squashed []string
}

// w compiles a phrase pattern: whole words, single spaces between them.
// "~" stands for up to three arbitrary words.
func w(p string) *regexp.Regexp {
	p = strings.ReplaceAll(p, " ~ ", `(?: \S+){0,3} `)
	return regexp.MustCompile(` (?:` + p + `) `)
}

// sub compiles a pattern matched anywhere (for scripts written without
// spaces between words: Chinese, Japanese).
func sub(p string) *regexp.Regexp { return regexp.MustCompile(p) }

// prescreenRules is the pre-screen's fixed vocabulary, compiled on first
// use (not at package init: every process that links guardian — execwrap's
// init re-exec among them — would pay ~24 ms for regexps it never runs). Patterns are written in the
// normalised alphabet (lower case, no diacritics: "precedentes", Russian
// "й" as "и"). TestPrescreenVocabulary holds a natural-language example of
// each.
var prescreenRules = sync.OnceValue(func() []rule {
	return []rule{
		{id: "override_instructions", phrases: []*regexp.Regexp{
			// English
			w(`(?:ignore|disregard|forget|override|bypass|abandon|overrule)(?: (?:all|any|every|of|the|your|these|those|my|previous|prior|above|earlier|preceding|former|original|system|other|existing|safety|security|given|current|standing|reviewer|s))* (?:instructions?|prompts?|directions?|directives?|guidelines?|guidance)`),
			w(`(?:ignore|disregard|forget|override|bypass|abandon|overrule)(?: (?:all|any|every|of|the|these|those|my))* (?:your|previous|prior|above|earlier|preceding|system|original|safety|security|reviewer s?|review)(?: \S+){0,2} (?:rules|polic(?:y|ies)|constraints|checks)`),
			w(`from now on you|you are now|you re now|you will now (?:act|approve|allow|answer|respond)|do anything now`),
			w(`(?:ignore|reveal|print|override|replace|forget) (?:your |the )?system prompt`),
			// Spanish
			w(`(?:ignora|ignore|ignorar|ignoren|olvida|olvide|olvidar|descarta|descarte|omite|omita)(?: (?:todas|todos|las|los|tus|sus|anteriores|previas|de|el|la))* (?:instrucciones|reglas|indicaciones|directrices|ordenes)`),
			// French
			w(`(?:ignore|ignorez|ignorer|ignores|oublie|oubliez|oublier|neglige|negligez|contourne|contournez)(?: (?:toutes|tous|les|tes|vos|ces|des|precedentes|anterieures))* (?:instructions|consignes|regles|directives)`),
			// German
			w(`(?:ignoriere|ignorier|ignorieren|ignoriert|vergiss|vergessen|vergesst|missachte|missachten|uberschreibe)(?: (?:alle|die|deine|ihre|eure|bisherigen|vorherigen|vorigen|obigen|fruheren|vorangegangenen|sie))* (?:anweisungen|anweisung|regeln|vorgaben|instruktionen|befehle)`),
			// Portuguese
			w(`(?:ignore|ignora|ignorar|esqueca|esquece|desconsidere|desconsidera)(?: (?:todas|todos|as|os|suas|tuas|instrucoes|anteriores|previas|acima))* (?:instrucoes|regras|orientacoes)`),
			// Italian
			w(`(?:ignora|ignorare|ignorate|dimentica|dimenticate|trascura)(?: (?:tutte|le|tue|vostre|precedenti|istruzioni|sopra))* (?:istruzioni|regole|indicazioni|direttive)`),
			// Russian
			w(`(?:игнорируи|игнорируите|игнорировать|проигнорируи|проигнорируите|забудь|забудьте|отбрось|отмени|не обращаи внимания на)(?: \S+){0,3} (?:инструкции|инструкциям|указания|указаниям|правила|правилам|команды)`),
			// Korean
			w(`(?:이전|앞의|위의|기존)(?: \S+){0,1} ?(?:지시|지시를|지시사항을|명령을|지침을|지시사항)(?: \S+){0,1} (?:무시|무시하고|무시하라|무시해|잊어|잊어라)\S*`),
		}, plain: []*regexp.Regexp{
			// "New instructions:" and its translations (the colon makes it a header, not prose).
			sub(`(?:new|updated|revised|real|actual|hidden|secret|nuevas?|nouvelles?|neuen?|novas?|nuove|новые|новая)\s+(?:instructions|directives|system prompt|instrucciones|directrices|consignes|anweisungen|instrucoes|istruzioni|инструкции|указания)\s*[:：]`),
			// Chinese
			sub(`(?:忽略|无视|無視|忽视|忽視|不要理会|不要理會|不理会|不理會|忘记|忘記|忘掉|忽略掉)[^。！!?？]{0,10}(?:指令|指示|说明|說明|规则|規則|提示词|提示詞|提示|要求)`),
			sub(`新的?(?:指令|指示)`),
			// Japanese
			sub(`(?:指示|命令|指令|ルール|プロンプト)を?(?:すべて|全て)?(?:無視|忘れ)`),
		}, squashed: []string{
			"ignorepreviousinstructions", "ignoreallpreviousinstructions", "ignoreallinstructions", "ignoreaboveinstructions",
			"ignoretheaboveinstructions", "ignorepriorinstructions", "ignoreallpriorinstructions", "ignoreyourinstructions",
			"disregardpreviousinstructions", "disregardallpreviousinstructions", "disregardallinstructions", "disregardyourinstructions",
			"forgetpreviousinstructions", "forgetallpreviousinstructions", "forgetyourinstructions", "overrideyourinstructions",
		}},

		{id: "role_marker", plain: []*regexp.Regexp{
			sub(`(?m)(?:^|[^\pL\pN\s_\-])[\s>*#]*(?:system|assistant|developer)\s*(?:message|prompt|note|override)?\s*[:：](?:\s|$)`),
			sub(`<\|?\s*(?:im_start|im_end|system|endoftext|assistant|user)\s*\|?>`),
			sub(`\[/?inst\]|<</?sys>>|\[/?system\]|<\s*/?\s*system\s*>`),
			sub(`(?m)^\s*#{2,}\s*(?:system|instructions?|new instructions|response|answer)\b`),
			sub(`<\s*/?\s*request-data\s*>|end of (?:the )?(?:request data|data block|request block)\b`),
		}},

		{id: "dictated_verdict", phrases: []*regexp.Regexp{
			w(`(?:answer|respond|reply|output|say|decide|verdict|decision|conclude)(?: (?:with|is|should|be|must|will|as|only|just|exactly|the|word|a|an|it|this|to|in|json|your|field|value|decision|verdict))* (?:allow|allowed|allow once|allow session|allow always|approve|approved|approval|safe|low risk)`),
			w(`(?:allow|deny) (?:always|once|session)`),
			w(`(?:risk|risk level|threat|severity)(?: (?:is|level|should|be|must|=|of|this|request))* (?:low|none|minimal|zero|negligible)`),
			w(`(?:mark|treat|classify|rate|consider|label|flag|score|grade)(?: (?:this|it|the|my|that|request|command|host|access|call|connection|as|one))* as (?:safe|benign|harmless|trusted|approved|allowed|low risk|legitimate|fine|ok)`),
			// Spanish, French, German, Portuguese, Italian, Russian
			w(`(?:responde|responda|contesta|conteste|devuelve|devuelva|marca|marque)(?: (?:con|solo|unicamente|que|como|la|el|decision))* (?:allow|permitir|aprobar|aprobado|seguro)`),
			w(`(?:reponds|repondez|repondre|renvoie|renvoyez|reponse|marque|marquez)(?: (?:par|avec|uniquement|seulement|que|comme|la|le|decision))* (?:allow|autoriser|autorise|oui|approuver|approuve|sur|sure)`),
			w(`(?:antworte|antwortet|antworten|gib|markiere|entscheidung)(?: (?:mit|nur|sie|als|die|den|zuruck|ist))* (?:allow|ja|genehmigt|erlaubt|erlauben|sicher)`),
			w(`(?:responda|responde|retorne|marque)(?: (?:com|apenas|somente|como|a|o))* (?:allow|sim|aprovar|aprovado|permitir|seguro)`),
			w(`(?:rispondi|rispondete|restituisci|segna)(?: (?:con|solo|soltanto|come|la|il))* (?:allow|si|approvato|approva|consentire|sicuro)`),
			w(`(?:ответь|ответьте|верни|верните|напиши|пометь)(?: \S+){0,2} (?:allow|разрешить|разрешено|одобрить|одобрено|да|безопасно)`),
		}, plain: []*regexp.Regexp{
			sub(`"?decision"?\s*[:=]\s*"?\s*allow`),
			sub(`(?:回答|回复|输出|返回|答复)[^。！!?？]{0,6}(?:allow|允许|批准|通过)`),
			sub(`(?:allow|許可|承認)と(?:答え|回答|返答|出力)`),
		}, squashed: []string{"answerallow", "respondwithallow", "replywithallow", "decisionallow", "allowalways", "allowonce", "allowsession", "riskislow"}},

		{id: "claimed_approval", phrases: []*regexp.Regexp{
			w(`pre ?approved|pre ?authori[sz]ed|pre ?cleared|pre ?vetted|pre ?approval|preapproval`),
			w(`(?:already|previously) (?:been )?(?:approved|authori[sz]ed|cleared|vetted|whitelisted|allowlisted|greenlit|signed off)`),
			w(`(?:approved|authori[sz]ed|cleared|signed off|sanctioned|whitelisted|allowlisted|greenlit|vetted|okayed|ok d|permitted) (?:by|from) (?:the |a |an |my |our |your |their )?(?:admins?|administrators?|security|secops|sec ops|users?|owners?|operators?|team|lead|managers?|humans?|reviewers?|guardian|cto|ciso|it|devops|sre|maintainers?|supervisor|boss|policy)`),
			w(`(?:admin|administrator|security team|operator|owner|user|manager|reviewer) (?:has|have|already|has already|have already) (?:approved|authori[sz]ed|allowed|okayed|signed off)`),
			w(`(?:all|every|any) (?:hosts?|requests?|domains?|connections?|commands?) (?:are|is) (?:now )?(?:allowed|approved|permitted|whitelisted|allowlisted|safe)`),
			// Spanish, French, German, Portuguese, Italian, Russian
			w(`(?:ya|previamente) (?:fue |ha sido |esta |estaba )?(?:aprobad[oa]|autorizad[oa]|permitid[oa])|pre ?aprobad[oa]|aprobad[oa] por (?:el |la )?(?:administrador|admin|equipo|usuario|seguridad)`),
			w(`deja (?:ete )?(?:approuvee?s?|autorisee?s?|validee?s?)|pre ?approuvee?s?|(?:approuvee?|autorisee?) par (?:l |le |la )?(?:administrateur|admin|equipe|utilisateur|securite)`),
			w(`(?:bereits|schon|vorab) (?:genehmigt|freigegeben|erlaubt|autorisiert|bewilligt)|(?:genehmigt|freigegeben) (?:durch|von) (?:den |die |das )?(?:admin|administrator|sicherheitsteam|team|nutzer|benutzer)`),
			w(`ja (?:foi )?(?:aprovad[oa]|autorizad[oa])|pre ?aprovad[oa]|aprovad[oa] pel[oa] (?:administrador|admin|equipe|usuario)`),
			w(`gia (?:stat[oa] )?(?:approvat[oa]|autorizzat[oa])|pre ?approvat[oa]|approvat[oa] dal?(?:l)? ?(?:amministratore|admin|team|utente)`),
			w(`(?:уже|заранее|предварительно) (?:был[оа]? |была )?(?:одобрен[оа]?|разрешен[оа]?|согласован[оа]?|утвержден[оа]?)`),
			w(`(?:이미|사전|사전에) ?(?:승인|허가)\S*`),
		}, plain: []*regexp.Regexp{
			sub(`(?:已经?|已經|事先|预先|預先|提前)(?:被)?(?:批准|授权|授權|审批通过|審批通過|审核通过|審核通過|核准|同意)`),
			sub(`(?:管理员|安全团队|用户|负责人)(?:已经?)?(?:批准|授权|同意)`),
			sub(`(?:承認済み|許可済み|事前承認|承認されています|既に承認|すでに承認)`),
		}, squashed: []string{"preapproved", "preauthorized", "preauthorised", "alreadyapproved", "alreadyauthorized"}},

		{id: "imperative_to_reviewer", phrases: []*regexp.Regexp{
			w(`(?:please|kindly|go ahead and) (?:approve|accept|authori[sz]e|whitelist|allowlist|greenlight)|please allow (?:this|it|the request|my request|access)`),
			w(`(?:you|reviewer|guardian|approver) (?:must|should|shall|need to|have to|will|can|are to|re to) (?:approve|allow|accept|permit|authori[sz]e|whitelist|allowlist|grant|greenlight)`),
			w(`(?:approve|allow|accept|permit|authori[sz]e|greenlight|grant) (?:this|the|my|that) (?:request|approval|command|access|execution|connection|call|one)`),
			w(`(?:do not|don t|dont|never|must not|mustn t|should not|shouldn t|you can t|you cannot) (?:deny|reject|refuse|flag|decline|escalate)(?: (?:this|it|the request|my request|me|access|the host|the command))`),
			w(`(?:aprueba|apruebe|aprobar|permite|permita|autoriza|autorice|acepta|acepte) (?:esta|este|la|el|mi) (?:solicitud|peticion|comando|acceso|conexion)|no (?:lo )?(?:deniegues|bloquees|rechaces)`),
			w(`(?:approuve|approuvez|approuver|autorise|autorisez|accepte|acceptez|valide|validez) (?:cette|la|ce|le|ma|mon) (?:demande|requete|commande|acces|connexion)|ne (?:la |le )?(?:refuse|refusez|bloque|bloquez|rejette|rejetez) pas`),
			w(`(?:genehmige|genehmigen|genehmigt|erlaube|erlauben|akzeptiere|gib|gebt)(?: \S+){0,1} (?:diese|die|den|das|meine|meinen)(?: \S+){0,1} (?:anfrage|anforderung|befehl|zugriff|verbindung|freigabe|frei)|nicht (?:ablehnen|blockieren|verweigern)`),
			w(`(?:aprove|aprova|autorize|autoriza|permita|aceite) (?:esta|este|a|o|minha|meu) (?:solicitacao|pedido|comando|acesso|conexao)|nao (?:negue|bloqueie|rejeite)`),
			w(`(?:approva|approvate|autorizza|autorizzate|consenti|accetta) (?:questa|la|questo|il|mia|mio) (?:richiesta|comando|accesso|connessione)|non (?:negare|bloccare|rifiutare)`),
			w(`(?:одобри|одобрите|разреши|разрешите|пропусти|пропустите|утверди|утвердите|прими|примите)(?: \S+){0,2} (?:запрос|команду|доступ|соединение|заявку)|не (?:блокируи|отклоняи|запрещаи)`),
			w(`(?:이|본|해당)? ?(?:요청|명령|접근)(?:을|를)? ?(?:승인|허용)(?:하라|해|해라|하세요|해주세요|하십시오)`),
		}, plain: []*regexp.Regexp{
			sub(`(?:批准|允许|允許|通过|通過|放行|同意)(?:这个|這個|该|該|此|本|这一?|這一?)(?:请求|請求|命令|访问|訪問|连接|連接|申请|申請)`),
			sub(`(?:直接|务必|務必|必须|必須|一定要|请|請)(?:批准|允许|允許|放行|通过|通過)`),
			sub(`(?:不要|别|切勿)(?:拒绝|阻止|拦截)`),
			sub(`(?:この|本)?(?:リクエスト|要求|コマンド|アクセス|接続)を(?:承認|許可)(?:して|しろ|せよ|してください)`),
			sub(`(?:拒否|ブロック)しないで`),
		}, squashed: []string{"approvethisrequest", "allowthisrequest", "pleaseapprove", "youmustapprove", "mustapprovethis"}},

		{id: "addresses_reviewer", phrases: []*regexp.Regexp{
			w(`(?:reviewers?|guardian|approvers?|moderators?|auditors?|gatekeeper|llm|language model|ai model|ai reviewer|security reviewer|security bot)(?: \S+){0,8} (?:approve|approved|approving|allow|allowed|accept|permit|grant|safe|whitelist|allowlist|sign off)`),
			w(`(?:approve|allow|accept|permit|grant|whitelist|allowlist)(?: \S+){0,6} (?:reviewers?|guardian|approvers?|moderators?|llm|language model|ai model)`),
			w(`(?:note|message|memo|instruction|instructions|notice|attention|hello|hi|hey|dear) (?:to|for) (?:the )?(?:reviewers?|guardian|approvers?|moderators?|ai|llm|model|assistant|security)`),
			w(`(?:dear|hello|hi|hey|attention|attn) (?:reviewers?|guardian|approvers?|moderators?|ai|llm|model|assistant)`),
			w(`(?:revisor|revisora|aprobador|moderador|revisores)(?: \S+){0,8} (?:aprueba|apruebe|aprobar|permite|permitir|acepta|seguro)`),
			w(`(?:reviseur|relecteur|verificateur|moderateur|evaluateur)(?: \S+){0,8} (?:approuve|approuvez|approuver|autorise|autorisez|accepte|acceptez|sur)`),
			w(`(?:prufer|gutachter|reviewer|moderator)(?: \S+){0,8} (?:genehmige|genehmigen|erlaube|erlauben|akzeptiere|sicher)`),
			w(`(?:revisore|valutatore|moderatore)(?: \S+){0,8} (?:approva|approvare|autorizza|consenti|sicuro)`),
			w(`(?:проверяющии|ревьюер|рецензент|модератор|проверяющему|ревьюеру)(?: \S+){0,8} (?:одобри|одобрите|разреши|разрешите|пропусти|безопасно)`),
			w(`(?:검토자|리뷰어|심사자)\S*(?: \S+){0,8} (?:승인|허용)\S*`),
		}, plain: []*regexp.Regexp{
			sub(`(?:审核员|審核員|审查员|審查員|审核者|審核者|审查者|審查者|评审员|評審員|审批人|審批人|审核人|審核人)[^。]{0,20}(?:批准|允许|允許|通过|通過|放行|同意|安全)`),
			sub(`(?:レビュアー|レビューア|審査担当|審査者|承認者)[^。]{0,20}(?:承認|許可|安全)`),
		}},
	}
})

// field is one agent-controlled text of a request.
type field struct{ name, text string }

// screenFields lists the texts screened: every agent-controlled field. The
// command's arguments are joined with line breaks, so an argument that
// starts like a role marker is at a line start and words split across
// arguments still meet in the spaced views.
func screenFields(b Bounded) []field {
	return []field{
		{"justification", b.Justification}, {"reason", b.Reason}, {"cwd", b.Cwd},
		{"command", strings.Join(b.Command, "\n")}, {"host", b.Host}, {"target", b.Target}, {"path", b.Path},
		{"session_id", b.SessionID}, {"environment_id", b.EnvironmentID}, {"execution_id", b.ExecutionID},
		{"sandbox_permissions", b.SandboxPermissions},
	}
}

// combinedRules is every rule's patterns joined into one expression per view
// (one pass over the text instead of one per pattern); the rule is looked up
// pattern by pattern only when the combined expression matched.
type combinedRules struct {
	phrases, plain *regexp.Regexp
}

var combinedOnce = sync.OnceValue(func() combinedRules { return combine(prescreenRules()) })

func combine(rs []rule) combinedRules {
	var ph, pl []string
	for _, r := range rs {
		for _, re := range r.phrases {
			ph = append(ph, "(?:"+re.String()+")")
		}
		for _, re := range r.plain {
			pl = append(pl, "(?:"+re.String()+")")
		}
	}
	return combinedRules{phrases: regexp.MustCompile(strings.Join(ph, "|")), plain: regexp.MustCompile(strings.Join(pl, "|"))}
}

// Screen runs the deterministic pre-screen over every agent-controlled
// field of req (cut to its cap first, as a reviewer would see it) and over
// whatever those fields hide in base64, hex, percent-encoding, \u/\x escapes
// or punycode (two levels deep). It reports the first finding.
func Screen(req ReviewRequest) (Finding, bool) {
	for _, f := range screenFields(Bound(req)) {
		if f.text == "" {
			continue
		}
		if r, ok := matchText(f.text); ok {
			return Finding{Field: f.name, Rule: r}, true
		}
		for _, d := range decodings(f.text) {
			if r, ok := matchText(d); ok {
				return Finding{Field: f.name, Rule: r, Encoding: "decoded"}, true
			}
			for _, d2 := range decodings(d) {
				if r, ok := matchText(d2); ok {
					return Finding{Field: f.name, Rule: r, Encoding: "decoded"}, true
				}
			}
		}
	}
	return Finding{}, false
}

// matchText normalises s and returns the first rule any view matches.
func matchText(s string) (string, bool) {
	v := Normalize(s)
	spaced, folded := " "+v.Spaced+" ", " "+v.Folded+" "
	combined := combinedOnce()
	hit := combined.phrases.MatchString(spaced) || (folded != spaced && combined.phrases.MatchString(folded)) ||
		combined.plain.MatchString(v.Plain)
	for _, r := range prescreenRules() {
		for _, sq := range r.squashed {
			if hit {
				break
			}
			hit = strings.Contains(v.Squashed, sq)
		}
	}
	if !hit {
		return "", false
	}
	for _, r := range prescreenRules() {
		for _, re := range r.phrases {
			if re.MatchString(spaced) || re.MatchString(folded) {
				return r.id, true
			}
		}
		for _, re := range r.plain {
			if re.MatchString(v.Plain) {
				return r.id, true
			}
		}
		for _, sq := range r.squashed {
			if strings.Contains(v.Squashed, sq) {
				return r.id, true
			}
		}
	}
	return "", false
}

// Prescreened is a Reviewer behind the pre-screen: a flagged request is
// denied (risk high, rationale prompt_injection_suspected) without calling
// the backend; every other request goes to the backend. It never routes a
// flagged request to a human (docs/guardian.md says why).
type Prescreened struct {
	backend Reviewer
	counter PrescreenCounter
	log     *slog.Logger
}

// WithPrescreen puts backend behind the pre-screen.
func WithPrescreen(backend Reviewer, deps Deps) *Prescreened {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Prescreened{backend: backend, counter: deps.Prescreen, log: log}
}

// Review screens req, then asks the backend.
func (p *Prescreened) Review(ctx context.Context, req ReviewRequest) (Verdict, error) {
	if tr := Bound(req).Truncated; len(tr) > 0 {
		p.log.Info("guardian: fields cut to their length cap before review", "approval_id", req.ID, "fields", strings.Join(tr, ","))
	}
	if f, hit := Screen(req); hit {
		p.count(PrescreenFlagged)
		// The field and rule are logged; the matched text is not (it may
		// hold anything the agent chose to write, secrets included).
		p.log.Warn("guardian pre-screen: reviewer-directed text in an agent-controlled field; denied without asking the backend",
			"approval_id", req.ID, "field", f.Field, "rule", f.Rule, "encoding", f.Encoding)
		return Verdict{Decision: DecisionDeny, Risk: RiskHigh, Rationale: RationalePromptInjection, Screened: true, Finding: f}, nil
	}
	p.count(PrescreenPassed)
	return p.backend.Review(ctx, req)
}

func (p *Prescreened) count(result string) {
	if p.counter != nil {
		p.counter.GuardianPrescreen(result)
	}
}
