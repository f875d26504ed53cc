# bash completion for ckptfs. Subcommands, options and the values of enum options are
# read from the binary's own --help when completing (an option's `{a,b,c}`), so this
# script never falls behind it. `--checkpoint` offers latest, best and the entries of the
# run named on the line (from `ckptfs inspect --json RUN`); values that are paths complete
# as paths; `ckptfs umount` offers the ckptfs mounts in /proc/self/mounts.

# The choices CLI11 prints for option $2 of subcommand $1: "  --zip-crc TEXT:{auto,mount,off}".
_ckptfs_choices() {
  "$3" "$1" --help 2>/dev/null |
    sed -n "s/^  \(-[^ ,]*,\)\{0,1\}$2 [A-Z]*:{\([^}]*\)}.*/\2/p" | tr ',' ' '
}

# The options of subcommand $1 that take a value ($2: the binary): "  --cache-size TEXT ...".
_ckptfs_value_options() {
  "$2" "$1" --help 2>/dev/null |
    sed -n 's/^  \(-[^ ,]*,\)\{0,1\}\(-[-a-z]*\) \(TEXT\|INT\|FLOAT\|UINT\).*/\2/p'
}

# The entry names of the run at $2 ($1: the binary), one per line.
_ckptfs_run_entries() {
  "$1" inspect --json "$2" 2>/dev/null |
    sed -n '/^  "entries": \[/,/^  \]/s/^      "name": "\(.*\)",$/\1/p'
}

_ckptfs() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local bin=${COMP_WORDS[0]} cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  COMPREPLY=()
  if [[ -z $cmd ]]; then
    if [[ $cur == -* ]]; then
      COMPREPLY=($(compgen -W "$("$bin" --help 2>/dev/null | sed -n 's/^  \(-[^ ]*\).*/\1/p' | tr ',' ' ')" -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$("$bin" --help 2>/dev/null | sed -n '/^Subcommands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p')" -- "$cur"))
    fi
    return
  fi
  case $prev in
    --cache-dir | --spill-dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --log-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --checkpoint)
      # SOURCE: the first word after the subcommand, before or after the cursor, that is
      # neither an option nor an option's value (the options that take one: from --help).
      local source="" entries takes
      takes=" $(_ckptfs_value_options "$cmd" "$bin" | tr '\n' ' ') "
      for ((i = i + 1; i < ${#COMP_WORDS[@]}; i++)); do
        ((i == COMP_CWORD)) && continue
        case ${COMP_WORDS[i]} in
          -*) [[ $takes == *" ${COMP_WORDS[i]} "* ]] && ((i++)) ;;
          *) source=${COMP_WORDS[i]}; break ;;
        esac
      done
      entries=$([[ -n $source ]] && _ckptfs_run_entries "$bin" "$source")
      local IFS=$'\n'
      COMPREPLY=($(compgen -W "latest"$'\n'"best"$'\n'"$entries" -- "$cur"))
      return
      ;;
    -o | --level | --frame-size | --threads | --shard-size | --cache-size | --cache-dir-size | \
      --timeout | --endpoint | --region | --model-key | --uid | --gid | --umask | --file-mode | \
      --dir-mode | --idle-close | --relist) return ;;
    --*)
      local choices
      choices=$(_ckptfs_choices "$cmd" "$prev" "$bin")
      if [[ -n $choices ]]; then
        COMPREPLY=($(compgen -W "$choices" -- "$cur"))
        return
      fi
      ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$("$bin" "$cmd" --help 2>/dev/null | sed -n 's/^  \(-[^ ]*\).*/\1/p' | tr ',' ' ')" -- "$cur"))
  elif [[ $cmd == umount ]]; then
    COMPREPLY=($(compgen -W "$(awk '$3 == "fuse.ckptfs" { print $2 }' /proc/self/mounts)" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _ckptfs ckptfs
