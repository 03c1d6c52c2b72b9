# write_if_changed(PATH CONTENT): writes CONTENT to PATH only where it differs, so that a
# generated source that did not change rebuilds nothing that includes it. Included by the
# scripts that generate sources at build time (git_revision.cmake, embed_families.cmake).
function(write_if_changed path content)
  set(old "")
  if(EXISTS "${path}")
    file(READ "${path}" old)
  endif()
  if(NOT old STREQUAL content)
    file(WRITE "${path}" "${content}")
  endif()
endfunction()
