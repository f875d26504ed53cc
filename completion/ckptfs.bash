# bash completion for ckptfs. Subcommands and options are read from the binary's own
# --help when completing, so this script never falls behind it; values that are paths
# complete as paths, and `ckptfs umount` offers the ckptfs mounts in /proc/self/mounts.
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
    --addressing) COMPREPLY=($(compgen -W "auto path virtual" -- "$cur")); return ;;
    --log-level) COMPREPLY=($(compgen -W "error warn info debug" -- "$cur")); return ;;
    --level | --frame-size | --shard-size | --cache-size | --cache-dir-size | --timeout | \
      --endpoint | --region | -o) return ;;
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
