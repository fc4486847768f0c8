// Package gatetest holds the injection corpus the gate is tested against: injection variants
// (paraphrases, homoglyphs, zero-width and bidi characters, other languages, injections split
// across sessions) and ordinary lessons of the same shape, read by the gate's own tests and by the
// end-to-end tests of the miner and memoryd.
package gatetest

import (
	_ "embed"
	"fmt"

	"gopkg.in/yaml.v3"
)

// Corpus is the repository's set of injection variants and ordinary lessons
// (corpus.yaml); the gate's tests and the end-to-end tests of the miner and memoryd
// read it, so every layer is checked against the same texts.
type Corpus struct {
	Known      []string          `yaml:"known"`
	Injections []CorpusInjection `yaml:"injections"`
	Ordinary   []CorpusLesson    `yaml:"ordinary"`
}

// CorpusInjection is one injection: the text each session in turn offers.
type CorpusInjection struct {
	Name      string   `yaml:"name"`
	Tools     []string `yaml:"tools"`
	Seen      []string `yaml:"seen"`
	Sessions  []string `yaml:"sessions"`
	JudgeOnly bool     `yaml:"judge_only"`
}

// CorpusLesson is one ordinary lesson.
type CorpusLesson struct {
	Tools []string `yaml:"tools"`
	Seen  []string `yaml:"seen"`
	Text  string   `yaml:"text"`
}

//go:embed corpus.yaml
var corpusYAML []byte

// LoadCorpus parses the corpus.
func LoadCorpus() (*Corpus, error) {
	var c Corpus
	if err := yaml.Unmarshal(corpusYAML, &c); err != nil {
		return nil, fmt.Errorf("gate corpus: %w", err)
	}
	return &c, nil
}
