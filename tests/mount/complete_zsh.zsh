# Drives zsh's completion for real: an interactive zsh on a pseudo-terminal (zpty) with
# compinit over FPATH_DIR, the LINE typed and Tab pressed; prints what the terminal showed
# (the candidates, escape sequences and all) for CliTest to search.
# usage: zsh -f complete_zsh.zsh FPATH_DIR LINE
zmodload zsh/zpty || exit 2
zpty -b z zsh -f -i
zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D; PS1='PROMPT> '; LISTMAX=1000; unsetopt beep"
zpty -w z "echo READY"
zpty -r z line '*READY*' && zpty -r z line '*READY*' || exit 3
zpty -w -n z "$2"$'\t'
# The list comes after the completion function ran (it runs ckptfs): give it time, then
# read what there is.
sleep 2
out=""
while zpty -r -t z chunk; do out+=$chunk; done
print -r -- "$out"
zpty -d z
